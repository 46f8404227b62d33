"""Cases: ids, hypothesis strategies, run profiles, the fixed corpus."""
