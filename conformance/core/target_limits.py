"""What one GPU target can hold: the one table of targets' limits (the compile lane judges resources against it;
a kernel's `launch` reads a target's compute-unit count for its split-K choice).

Each field is cited in SOURCES, from the vendor's documentation or Triton's backend source:

- NVIDIA: the CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (registers per SM
  65536, at most 255 registers per thread, resident threads and blocks per SM, shared memory per SM and the most
  one block may opt into), and the SM counts of the parts named (H100/H200 SXM 132, A100 108, B200 148,
  RTX 5090 170: the vendors' product specifications).
- AMD: LLVM's AMDGPU backend user guide (AMDGPUUsage, "Processors" and "Memory Spaces": wavefront size 64 on
  GFX9 / CDNA, 32 by default on GFX11 / GFX12 under HIP; LDS 64 KiB per work-group, 160 KiB on gfx950), Triton's
  AMD backend (third_party/amd/lib/TritonAMDGPUToLLVM/TargetInfo.cpp: getWarpSize 64 on CDNA, 32 otherwise;
  getSharedMemorySize 160 KiB on CDNA4 = gfx950, 64 KiB otherwise), the CDNA3 / CDNA4 and RDNA3 / RDNA4 ISA
  reference guides (512 VGPRs per lane of a SIMD on CDNA3/4 (256 arch + 256 accumulation), at most 256 per
  wave on RDNA; 1536 VGPRs per SIMD lane in wave32 on gfx1100 / gfx1151 / gfx1201; 8 waves per SIMD on CDNA3/4,
  16 on RDNA3/4; 106 addressable SGPRs), and the compute-unit counts of the parts named (MI300X 304, MI355X 256,
  RX 7900 XTX 96, Radeon 8060S 40, RX 9070 XT 64).

`limits(arch)` -> TargetLimits; `LANE_TARGETS` are the nine targets the compile lane runs by default.
"""
from __future__ import annotations

from dataclasses import dataclass

from references.errors import require

CUDA_GUIDE = ("CUDA C++ Programming Guide, Technical Specifications per Compute Capability "
              "(docs.nvidia.com/cuda/cuda-c-programming-guide, table 'Technical Specifications')")
LLVM_AMDGPU = "LLVM AMDGPUUsage (llvm.org/docs/AMDGPUUsage.html): Processors table, LDS and wavefront size"
TRITON_AMD = ("Triton AMD backend: third_party/amd/lib/TritonAMDGPUToLLVM/TargetInfo.cpp (getWarpSize, "
              "getSharedMemorySize: 160 KiB on CDNA4, 64 KiB otherwise)")
CDNA3_ISA = "AMD Instinct MI300 (CDNA3) ISA reference guide, section 3.6: 512 VGPRs (arch + acc) per lane, 8 waves/SIMD"
CDNA4_ISA = "AMD Instinct MI355X (CDNA4) ISA reference guide: 512 VGPRs per lane, 160 KiB LDS per CU"
RDNA3_ISA = "AMD RDNA3 ISA reference guide, section 3.3: 1536 VGPRs per SIMD lane in wave32, 16 waves per SIMD"
RDNA4_ISA = "AMD RDNA4 ISA reference guide, section 3.3: 1536 VGPRs per SIMD lane in wave32, 16 waves per SIMD"


@dataclass(frozen=True)
class TargetLimits:
    """One target's limits. NVIDIA: registers per thread (max_regs), per SM (register_file), shared memory one
    block may use (lds_bytes) and per SM (lds_per_cu), threads and blocks per SM. AMD: VGPRs per wave (max_regs),
    VGPRs per SIMD lane (register_file), SGPRs, LDS per work-group (lds_bytes) and per CU, waves per SIMD,
    SIMDs per CU. wave_size: threads of a warp / wavefront. compute_units: SMs or CUs of the part named."""

    arch: str
    vendor: str  # "nvidia" | "amd"
    part: str
    wave_size: int
    max_regs: int
    register_file: int
    lds_bytes: int
    lds_per_cu: int
    compute_units: int
    max_threads_per_cu: int = 2048
    max_blocks_per_cu: int = 32
    max_waves_per_simd: int = 0
    simds_per_cu: int = 0
    max_sgprs: int = 0
    sources: tuple = ()

    @property
    def backend(self) -> str:
        return "cuda" if self.vendor == "nvidia" else "hip"


def _nv(arch, part, sms, smem_block, smem_sm, threads=2048):
    return TargetLimits(arch, "nvidia", part, 32, 255, 65536, smem_block, smem_sm, sms, threads, 32,
                        sources=(CUDA_GUIDE,))


def _amd(arch, part, cus, wave, max_regs, rf, lds, lds_cu, waves, simds, sources):
    return TargetLimits(arch, "amd", part, wave, max_regs, rf, lds, lds_cu, cus, max_waves_per_simd=waves,
                        simds_per_cu=simds, max_sgprs=106, sources=(LLVM_AMDGPU, TRITON_AMD, *sources))


TABLE = {t.arch: t for t in (
    _nv("sm80", "A100", 108, 166912, 167936),               # 163 KiB per block (opt-in), 164 KiB per SM
    _nv("sm90", "H100 / H200 SXM", 132, 232448, 233472),    # 227 KiB per block (opt-in), 228 KiB per SM
    _nv("sm100", "B200", 148, 232448, 233472),              # 227 / 228 KiB
    _nv("sm120", "RTX 5090", 170, 101376, 102400, 1536),    # 99 / 100 KiB (compute capability 12.0), 1536 threads
    _amd("gfx942", "MI300X", 304, 64, 512, 512, 65536, 65536, 8, 4, (CDNA3_ISA,)),
    _amd("gfx950", "MI355X", 256, 64, 512, 512, 163840, 163840, 8, 4, (CDNA4_ISA,)),
    # RDNA (WGP mode, HIP's default): a WGP is two CUs sharing 128 KiB LDS; per CU 64 KiB and 2 SIMD32
    _amd("gfx1100", "RX 7900 XTX", 96, 32, 256, 1536, 65536, 65536, 16, 2, (RDNA3_ISA,)),
    _amd("gfx1151", "Radeon 8060S (Strix Halo)", 40, 32, 256, 1536, 65536, 65536, 16, 2, (RDNA3_ISA,)),
    _amd("gfx1201", "RX 9070 XT", 64, 32, 256, 1536, 65536, 65536, 16, 2, (RDNA4_ISA,)),
)}
LANE_TARGETS = ("gfx1100", "gfx1151", "gfx1201", "gfx942", "gfx950", "sm80", "sm90", "sm100", "sm120")


def limits(arch: str) -> TargetLimits:
    """The limits of `arch` ("sm90", "gfx1201"); an arch without a row is refused, naming those with one."""
    require(arch in TABLE, "target", arch, f"one of {sorted(TABLE)} (the targets with a limits row)")
    return TABLE[arch]


def compute_units(arch: str | None, default: int = 0) -> int:
    """SMs / CUs of the target's reference part (a kernel's launch sizes split-K by it); `default` when unknown."""
    return TABLE[arch].compute_units if arch in TABLE else default
