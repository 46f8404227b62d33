"""Reports: coverage sweeps, validation runs, HTML/JSON reports, error profiles, try-refused."""
