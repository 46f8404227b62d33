"""A compiled program's resources judged against its target's limits (conformance.core.target_limits).

    judge(resources, limits, program) -> (verdict, message, occupancy, warnings)

Not fitting the target is a `resource-fail`: LDS / shared memory above what one work-group / block may use,
registers above the per-thread or per-wave maximum, or an occupancy of 0 (not one program fits a compute unit).
A spill (AMD: VGPR spills or scratch; NVIDIA: local memory per thread) fails unless the program
declares it allowed (`Program.allow_spill`). An occupancy below the program's declared floor
(`Program.min_occupancy`) warns, and so do AMD SGPR spills (they go to VGPR lanes, not memory).
SGPR counts are reported, not judged: the AMDGPU compiler itself keeps them within the target's file.
Occupancy: AMD waves per SIMD (LLVM's own figure from the registers, lowered
by the dynamic LDS Triton allocates); NVIDIA resident blocks per SM (registers in 256-register warp granules,
shared memory per SM, threads and blocks per SM).
"""
from __future__ import annotations

from conformance.core.launch import Program
from conformance.core.target_limits import TargetLimits


def occupancy(res: dict, lim: TargetLimits) -> int | None:
    """Waves per SIMD (AMD) or blocks per SM (NVIDIA) the resources allow; None when unreadable."""
    warps = res["num_warps"]
    if lim.vendor == "amd":
        occ = res.get("compiler_occupancy")
        if occ is None:
            return None
        lds = res.get("lds_bytes", 0)
        if lds:
            groups = lim.lds_per_cu // lds
            occ = min(occ, (groups * warps) // lim.simds_per_cu if groups else 0)
        return occ
    regs = res.get("registers")
    if regs is None:
        return None
    per_warp = -(-max(regs, 1) * 32 // 256) * 256  # registers are allocated per warp in units of 256
    by_regs = lim.register_file // (per_warp * warps)
    by_threads = lim.max_threads_per_cu // res["threads"]
    shared = res.get("shared_bytes") or 0
    by_shared = lim.lds_per_cu // shared if shared else lim.max_blocks_per_cu
    return max(0, min(by_regs, by_threads, by_shared, lim.max_blocks_per_cu))


def judge(res: dict, lim: TargetLimits, program: Program) -> tuple[str, str, int | None, list]:
    """(verdict "pass" | "resource-fail", message, occupancy, warnings) of one compiled program on its target."""
    fails, warns = [], []
    if lim.vendor == "amd":
        lds = res.get("lds_bytes", 0)
        if lds > lim.lds_bytes:
            fails.append(f"LDS {lds} B > {lim.lds_bytes} B per work-group on {lim.arch}")
        if res.get("vgprs", 0) > lim.max_regs:
            fails.append(f"VGPRs {res['vgprs']} > {lim.max_regs} per wave on {lim.arch}")
        # SGPR spills go to VGPR lanes (no memory traffic; LLVM falls back to scratch only when no VGPR is free,
        # which scratch_bytes then shows): reported, not failed. VGPR spills and scratch are memory spills.
        if res.get("sgpr_spills", 0):
            warns.append(f"{res['sgpr_spills']} SGPRs spilled to VGPR lanes")
        spilled = res.get("vgpr_spills", 0) or res.get("scratch_bytes", 0)
        spill_text = f"spills: {res.get('vgpr_spills', 0)} VGPRs, scratch {res.get('scratch_bytes', 0)} B"
    else:
        shared = res.get("shared_bytes") or 0
        if shared > lim.lds_bytes:
            fails.append(f"shared memory {shared} B > {lim.lds_bytes} B per block on {lim.arch}")
        if (res.get("registers") or 0) > lim.max_regs:
            fails.append(f"registers {res['registers']} > {lim.max_regs} per thread on {lim.arch}")
        spilled = res.get("local_bytes") or 0
        spill_text = f"local memory (spills) {spilled} B per thread"
    if spilled:
        (warns if program.allow_spill else fails).append(spill_text + (" (allowed)" if program.allow_spill else ""))
    occ = occupancy(res, lim)
    if occ == 0 and not fails:
        fails.append(f"occupancy 0 on {lim.arch}: not one program fits a compute unit")
    if occ is not None and program.min_occupancy is not None and 0 < occ < program.min_occupancy:
        warns.append(f"occupancy {occ} below the kernel's floor {program.min_occupancy}")
    return ("resource-fail" if fails else "pass"), "; ".join(fails), occ, warns
