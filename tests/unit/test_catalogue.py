"""The catalogue's trap guards and target choice can say no: a case without the trap is named as such, and a
kernel whose gate refuses everywhere gets the gate's own reason."""
from __future__ import annotations

import pytest

from conformance.checks import catalogue
from conformance.core import registry

registry.load_all()

# (entry key, a case body of the entry's family WITHOUT its trap, words the guard's reason must contain)
NO_TRAP = [
    ("gptq_zero_points_not_transposed",
     "M=3,N=64,K=128,g=64,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=22", "not square"),
    ("ct_zero_points_transposed",
     "M=3,N=16,K=64,g=32,wt=uint4b8,ao=0,dt=fp16,fmt=compressed_tensors,regime=exact,tier=exact,seed=1",
     "no zero points"),
    ("act_order_applied", "M=5,N=32,K=256,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v1,regime=exact,tier=exact,seed=1",
     "trivial"),
    ("v1_zero_point_zero_borrow",
     "M=3,N=64,K=256,g=64,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=51", "not asymmetric"),
    ("block_k_within_group",
     "M=3,N=64,K=256,g=128,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=91", "straddles"),
    ("bf16_dequantized_in_bf16",
     "M=5,N=64,K=256,g=64,wt=uint4b8,ao=0,dt=bf16,fmt=gptq_v2,regime=normal,tier=statistical,seed=0", "fp16"),
    ("v2_not_read_as_v1",
     "M=9,N=40,K=256,g=128,wt=uint4,ao=0,dt=bf16,fmt=awq,regime=exact,tier=exact,seed=41", "no GPTQ"),
    ("split_k_bf16_column_tail",
     "M=9,N=64,K=256,g=128,wt=uint4,ao=0,dt=bf16,fmt=gptq_v2,regime=exact,tier=exact,seed=41", "no column tail"),
    ("split_k_bf16_column_tail",
     "M=9,N=40,K=256,g=128,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=41", "not bf16"),
    ("block_k_tile_rules",
     "M=1,N=64,K=16,g=ch,wt=uint4b8,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=8180", "obeys"),
    ("fp8_zero_group_no_eps",
     "T=3,H=256,g=128,dt=bf16,f8=e4m3fn,ue8m0=0,colmajor=0,regime=normal,tier=statistical,seed=0", "all zero"),
]


@pytest.mark.parametrize("key,body,words", NO_TRAP, ids=[k for k, _, _ in NO_TRAP])
def test_trap_guard_rejects_a_case_without_the_trap(key, body, words):
    e = catalogue.entry(key)
    case = catalogue.Entry(key, "", (), e.family, (body,), e.trap).case(0, "any_kernel")
    why = e.trap(case)
    assert why is not None and words in why, why


def test_entries_are_unique_and_name_their_bug():
    keys = [e.key for e in catalogue.ENTRIES]
    assert len(keys) == len(set(keys))
    assert all(e.bug and e.cases for e in catalogue.ENTRIES)


def test_refusal_is_the_gates_own_reason():
    """rdna3_w4a16 refuses uint4 on every target: the skip reason quotes its gate, per target tried."""
    k = registry.get_kernel("rdna3_w4a16")
    case = catalogue.entry("v2_not_read_as_v1").case(0, k.name)
    t, why = catalogue.catalogue_target(k, case, "cpu")
    assert t is None and k.can_implement(case.config(), registry.Target("cpu")) in why
    t, why = catalogue.catalogue_target(k, catalogue.entry("v2_not_read_as_v1").case(1, k.name))
    assert why is None and str(t) == "rocm:gfx1100"
