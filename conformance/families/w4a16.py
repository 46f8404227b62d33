"""The W4A16 family: weight-only int4 (and int8) quantized linear layers, y = x @ W with fp16/bf16 activations."""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

from conformance.core.dtypes import ACT_DTYPES, LONG, SHORT, torch_dtype
from conformance.families import limits
from conformance.families.base import PROBE_TARGETS, CaseField, Exclusion, Family, Grade
from references.checkpoint import CHECKPOINT_FORMATS
from references.errors import InvalidInput, require
from references.generators import DATA_REGIMES, EXACT_REGIMES, exact_tier_max_k
from references.scalar_types import SCALAR_TYPES


@dataclass(frozen=True)
class W4A16Config:
    """A weight-only quantized linear layer: K inputs, N outputs, group_size -1 = channelwise."""

    weight_type: str
    group_size: int
    act_order: bool
    dtype: str
    format: str = "gptq_v2"
    N: int = 4096
    K: int = 4096
    family = "w4a16"

    def __post_init__(self):
        # the messages are built only on failure: collection constructs ~10^5 configs per process (gate scans)
        if self.weight_type not in SCALAR_TYPES:
            raise InvalidInput("weight_type", self.weight_type, f"one of {sorted(SCALAR_TYPES)}")
        if self.dtype not in ACT_DTYPES:
            raise InvalidInput("dtype", self.dtype, f"one of {sorted(ACT_DTYPES)}")
        if self.format not in CHECKPOINT_FORMATS:
            raise InvalidInput("format", self.format, f"one of {list(CHECKPOINT_FORMATS)}")
        # sizes (conformance.families.limits): positive, absurd ones refused. A config may still describe a shape
        # no real layer has (N=4100: kernels' gates must refuse it); commands call check_layer() for the layer rules
        limits.require_dim("N", self.N)
        limits.require_dim("K", self.K)
        limits.require_group_size("group_size", self.group_size, channelwise=True)

    def check_layer(self) -> W4A16Config:
        """The layer rules every command applies to user input (select, coverage, case ids): N a positive multiple
        of 8, group_size -1 or a positive divisor of K; InvalidInput names the field. Returns self."""
        limits.require_dim("N", self.N, multiple_of=8)
        limits.require_group("group_size", self.group_size, self.K, "K", channelwise=True)
        return self

    @property
    def effective_group_size(self) -> int:
        return self.K if self.group_size == -1 else self.group_size

    def to_dict(self) -> dict:
        return asdict(self)


class W4A16Family(Family):
    """Everything the suite knows about the w4a16 op family."""

    name = "w4a16"
    config_type = W4A16Config
    regimes = DATA_REGIMES  # references.generators' weight and activation regimes; EXACT_REGIMES are the exact tier's
    case_fields = (
        CaseField("M", "M", int, "rows of x (tokens), positive"),
        CaseField("N", "N", int, "output columns, a positive multiple of 8"),
        CaseField("K", "K", int, "input columns, a positive multiple of the group size"),
        CaseField("g", "group_size", int, "quantization group size along K, positive; `ch` = channelwise (-1)",
                  fmt=lambda g: "ch" if g == -1 else str(g), parse=lambda t: -1 if t == "ch" else int(t)),
        CaseField("wt", "weight_type", tuple(SCALAR_TYPES), "quantized weight type (`b8`/`b128`: symmetric bias)"),
        CaseField("ao", "act_order", bool, "act-order: g_idx permutes rows into groups (not with fmt=awq)",
                  default=False),
        CaseField("dt", "dtype", tuple(ACT_DTYPES), "activation dtype", fmt=SHORT.__getitem__,
                  parse=LONG.__getitem__),
        CaseField("fmt", "format", tuple(CHECKPOINT_FORMATS), "checkpoint format the weight is encoded in"),
    )
    # M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-<regime>-<tier>-s<seed>
    legacy_id_fields = ((0, "M", r"M([0-9]+)"), (1, "N", r"N([0-9]+)"), (2, "K", r"K([0-9]+)"),
                        (3, "group_size", r"g([0-9]+|ch)"), (4, "weight_type", r"([A-Za-z0-9_]+)"),
                        (5, "act_order", {"ao": "1", "noao": "0"}), (6, "dtype", r"([A-Za-z0-9_]+)"),
                        (7, "format", r"([A-Za-z0-9_]+)"))

    def validate_case(self, case) -> None:
        """W4A16 rules across fields: M, N, K positive, N % 8 == 0, group_size -1 or a positive divisor of K,
        no act-order with AWQ, and the exact tier only on exact-tier data (every partial sum exact in fp32)."""
        require(case.tier != "exact" or case.regime in EXACT_REGIMES, "regime", case.regime,
                f"one of {list(EXACT_REGIMES)} when family='w4a16' and tier='exact' (only their data is exactly "
                "representable)")
        for f in ("M", "N", "K"):
            require(getattr(case, f) > 0, f, getattr(case, f), "a positive int")
        require(case.N % 8 == 0, "N", case.N, "a positive multiple of 8")
        limits.require_dim("M", case.M, limit=limits.MAX_ROWS)  # absurd sizes (M=10^40) are bad ids, not crashes
        limits.require_dim("N", case.N, multiple_of=8)
        limits.require_dim("K", case.K)
        g = case.group_size
        require(g == -1 or g > 0, "group_size", g, "-1 (channelwise, written g=ch) or a positive int")
        require(g == -1 or case.K % g == 0, "K", case.K, f"a multiple of group_size={g}")
        require(not (case.act_order and case.format == "awq"), "act_order", case.act_order,
                "False for format='awq' (AWQ checkpoints have no g_idx)")

    def config_from_case(self, case) -> W4A16Config:
        """The layer config a gate judges (M, the row count, is not part of a layer config)."""
        return W4A16Config(weight_type=case.weight_type, group_size=case.group_size, act_order=case.act_order,
                           dtype=case.dtype, format=case.format, N=case.N, K=case.K)

    # ---- the config space ------------------------------------------------------------------------------------
    # group_size "K": one explicit group spanning K (group_size == K); -1: channelwise
    axes = (("weight_type", ("uint4", "uint4b8", "uint8", "uint8b128")),
            ("group_size", (-1, 32, 64, 128, 256, "K")),
            ("act_order", (False, True)),
            ("dtype", tuple(ACT_DTYPES)),
            ("format", tuple(CHECKPOINT_FORMATS)))
    exclusions = (
        Exclusion("w4a16 channelwise (group_size -1) with act-order",
                  "one group spans K, so g_idx is all zeros and act-order changes nothing (vLLM drops desc_act there)",
                  lambda c: c.act_order and c.group_size == -1),
        Exclusion("w4a16 awq with act-order", "AWQ checkpoints carry no g_idx",
                  lambda c: c.act_order and c.format == "awq"),
        Exclusion("w4a16 awq with 8-bit weight types", "AWQ packs 8 nibbles per int32 word: it defines 4-bit "
                  "weights only (references.codecs.awq refuses uint8, uint8b128)",
                  lambda c: c.format == "awq" and c.weight_type.startswith("uint8")),
    )
    probe_shapes = ({"N": 64, "K": 256}, {"N": 256, "K": 512}, {"N": 4096, "K": 4096})
    summary_all = ("format",)
    size_label = "M"
    folded = "checkpoint formats x act dtypes"
    prefill_m = 512
    bench_prefill_m = 512
    cli_fields = ("weight_type", "act_order", "format", "n", "k")
    WEIGHT_TYPES_4BIT = ("uint4", "uint4b8")
    WEIGHT_TYPES_8BIT = ("uint8", "uint8b128")
    COVERAGE_GROUPS = (-1, 32, 64, 128, 256)

    def config(self, cls, N: int = 4096, K: int = 4096) -> W4A16Config:
        """The layer config of a class at N x K (group kind "K" becomes group_size K)."""
        return W4A16Config(weight_type=cls.weight_type, group_size=K if cls.group_size == "K" else cls.group_size,
                           act_order=cls.act_order, dtype=cls.dtype, format=cls.format, N=N, K=K)

    def class_label(self, config) -> str:
        g = "channelwise" if config.group_size == -1 else f"g{config.group_size}"
        return f"{config.weight_type} {g} {'act-order' if config.act_order else 'no act-order'}"

    def ledger_configs(self) -> list:
        return self.config_space(weight_type=("uint4b8", "uint4"), group_size=(128, -1), dtype=("float16",),
                                 format=("gptq_v2",))

    def ledger_label(self, config) -> str:
        g = "ch" if config.group_size == -1 else config.group_size
        return f"w4a16 {config.weight_type} g{g} {'ao' if config.act_order else 'noao'} {config.dtype}"

    def representative_config(self) -> W4A16Config:
        return W4A16Config(weight_type="uint4b8", group_size=128, act_order=False, dtype="float16", N=64, K=256)

    def claims_8bit(self, kernels, target) -> bool:
        """True if any of `kernels` accepts some 8-bit config on `target` or a probe target."""
        from conformance.core.targets import parse_target

        ks = [k for k in kernels if k.family == self.name]
        probes = [target] + [parse_target(t) for t in PROBE_TARGETS]
        cfgs = self.config_space(weight_type=self.WEIGHT_TYPES_8BIT, group_size=self.COVERAGE_GROUPS,
                                 dtype=("float16",), format=("gptq_v2",))
        return any(k.can_implement(c, t) is None for k in ks for t in probes for c in cfgs)

    def coverage_configs(self, kernels, target, N: int = 4096, K: int = 4096, **_) -> tuple[list, list]:
        """4-bit types always, 8-bit types only when some kernel claims them; formats nested inside dtypes."""
        wts = self.WEIGHT_TYPES_4BIT + (self.WEIGHT_TYPES_8BIT if self.claims_8bit(kernels, target) else ())
        configs = self.config_space({"N": N, "K": K}, ("weight_type", "group_size", "act_order", "format", "dtype"),
                                    weight_type=wts, group_size=self.COVERAGE_GROUPS)
        return configs, [{"what": e.what, "why": e.why} for e in self.exclusions]

    # ---- strategies --------------------------------------------------------------------------------------------
    # the order of these values fixes which case a seed draws: reordering them changes every drawn case
    STRATEGY_VALUES = {"weight_type": ("uint4b8", "uint4"), "group_size": (128, -1, 32, 64, 256, "K")}

    def tier_regimes(self, tier: str) -> tuple:
        """The exact tier draws EXACT_REGIMES data only (every partial sum exact in fp32; exact_wide's block
        partials too wide for fp16); the statistical tier every realistic regime."""
        return EXACT_REGIMES if tier == "exact" else tuple(r for r in self.regimes if r not in EXACT_REGIMES)

    def accepted_classes(self, kernel, target, tier: str, profile) -> list:
        return list(_w4a16_classes(self, kernel.name, target, tier, profile.k_max, profile.n_max))

    def draw_case(self, draw, kernel, target, tier: str, profile) -> dict:
        from hypothesis import assume
        from hypothesis import strategies as st

        from conformance.families.draws import m_values, seeds

        table = _w4a16_classes(self, kernel.name, target, tier, profile.k_max, profile.n_max)
        if not table:
            raise ValueError(f"kernel={kernel.name!r} accepts no w4a16 class on target={target} "
                             f"within profile {profile.name}")
        cls = draw(st.sampled_from(table))
        K = draw(st.sampled_from(_w4a16_ks(self, kernel.name, target, tier, profile.k_max, profile.n_max, cls)))
        ns = [N for N in range(8, profile.n_max + 1, 8) if kernel.can_implement(self.config(cls, N, K), target) is None]
        assume(ns)  # rare: the gate accepted K only for some N in the probe set
        N = draw(st.sampled_from(ns))
        config = self.config(cls, N, K)
        regimes = self.tier_regimes(tier)
        if tier == "exact":  # the exact regimes whose fp32 bound holds at this K (exact_wide's reaches further)
            regimes = tuple(r for r in regimes if K <= exact_tier_max_k(cls.weight_type, regime=r))
        return {"regime": draw(st.sampled_from(regimes)), "seed": draw(seeds()),
                "group_size": config.group_size, "dtype": cls.dtype, "M": draw(m_values(profile.m_max)), "N": N,
                "K": K, "weight_type": cls.weight_type, "act_order": cls.act_order, "format": cls.format}

    def any_case_fields(self):
        from hypothesis import strategies as st

        from conformance.families.draws import n_values, seeds

        return st.builds(
            lambda tier, reg, seed, gs_mult, gk, M, N, wt, ao, dt, fmt: dict(
                regime=(reg if reg in EXACT_REGIMES else "exact") if tier == "exact" else reg, tier=tier, seed=seed,
                group_size=-1 if gk == -1 else gk,
                dtype=dt, M=M, N=N, K=(gk if gk > 0 else 8) * gs_mult, weight_type=wt, act_order=ao and fmt != "awq",
                format=fmt),
            st.sampled_from(("exact", "statistical")), st.sampled_from(self.regimes), seeds(), st.integers(1, 64),
            st.sampled_from((-1, 8, 32, 64, 128, 256, 24)), st.integers(1, 4096), n_values(8192),
            st.sampled_from(tuple(SCALAR_TYPES)), st.booleans(), st.sampled_from(tuple(ACT_DTYPES)),
            st.sampled_from(CHECKPOINT_FORMATS))

    # ---- corpus --------------------------------------------------------------------------------------------------
    # (M, N, K, tier, regime): decode row, odd multi-row tail, two N tiles; K = 512 gives group 256 two groups
    CORPUS_SHAPES = ((3, 64, 256, "exact", "exact"), (17, 64, 512, "statistical", "normal"),
                     (1, 128, 256, "statistical", "outlier_channels"), (33, 64, 512, "statistical", "heavy_tailed"))
    # formats rotated over a class's cases so every checkpoint codec feeds every kernel's load step
    CORPUS_FORMATS = ("gptq_v2", "compressed_tensors", "awq", "gptq_v1")

    def corpus_classes(self) -> list[tuple]:
        """weight type x group x act-order x dtype (formats rotate over a class's cases)."""
        out = []
        for c in self.config_classes(weight_type=("uint4b8", "uint4"), group_size=(-1, 32, 128, 256),
                                     format=("gptq_v2",)):
            gl = "ch" if c.group_size == -1 else f"g{c.group_size}"
            label = f"{c.weight_type} {gl} {'ao' if c.act_order else 'noao'} {c.dtype}"
            out.append((label, (("weight_type", c.weight_type), ("group_size", c.group_size),
                                ("act_order", c.act_order), ("dtype", c.dtype))))
        return out

    def corpus_case_fields(self, fields: dict, seed0: int) -> list[dict]:
        out = []
        for i, (M, N, K, tier, regime) in enumerate(self.CORPUS_SHAPES):
            fmt = "gptq_v2" if fields["act_order"] else self.CORPUS_FORMATS[(seed0 + i) % len(self.CORPUS_FORMATS)]
            out.append(dict(regime=regime, tier=tier, seed=seed0 + i, M=M, N=N, K=K, format=fmt, **fields))
        return out

    # ---- running and grading ------------------------------------------------------------------------------------
    def exact_unjudgeable(self, numerics) -> str | None:
        return None  # exact-regime data makes every W4A16 kernel's output exact (up to exact_tier_max_k)

    def run(self, case, kernel, config, ex) -> tuple:
        """Canonical weight and activations from the seed, encoded in the case's format, loaded by the kernel;
        exact tier: bit equality with the fp64 reference rounded once; statistical: the declared error model."""
        import torch

        from references import codecs
        from references.gemm import abs_bound, reference_gemm
        from references.generators import random_activations, random_canonical

        act = torch_dtype(case.dtype)
        w = random_canonical(case.K, case.N, case.group_size, case.weight_type, act, case.regime, case.seed,
                             act_order=case.act_order)
        x = random_activations(case.M, case.K, act, case.regime, case.seed)
        # GPTQ v1 cannot store z = 0 (it stores z - 1): encode with the int32 borrow real v1 checkpoints
        # carry, so every kernel reading v1 is tested on it
        policy = {"v1_zero_policy": "borrow"} if case.format == "gptq_v1" else {}
        # only the checkpoint tensors the kernel's intake declares (formats outside it are refused by its gate)
        operands = ex.load(kernel.intake.restrict(codecs.encode(w, case.format, **policy)))
        xd = x.to(ex.device)
        raw = ex.call(operands, xd)
        y = ex.to_cpu(raw)  # a device output's copy may be laid out anew: its layout is judged on `raw` below
        want = (case.M, case.N)
        if not isinstance(y, torch.Tensor) or tuple(y.shape) != want or y.dtype != act:
            got = (tuple(y.shape), y.dtype) if isinstance(y, torch.Tensor) else type(y)
            return Grade(False, {}, f"output {got} is not {want} {act}"), ""
        same, note = ex.determinism(operands, xd, y, config, case.M)
        num = kernel.numerics(config, case.M)
        tol = ex.tolerance
        rd = ex.reference_device  # the fp64 products where they are cheap (Execution.reference_device)
        if rd != "cpu":
            x, w, y = x.to(rd), w.to(rd), y.to(rd)
        # the exact tier holds while every partial sum fits the declared accumulators at this M; past that (e.g.
        # fp16 partials at small M) the declared error model judges the case, and the detail says so
        inexact = (exact_limit_reason(num, case.weight_type, case.K, case.M, case.regime) if case.tier == "exact"
                   else None)
        if case.tier == "exact" and inexact is None:
            roundings = None if num.dequant_roundings == 1 else num.dequant_roundings
            y_ref = reference_gemm(x, w, roundings, (num.dequant_dtype or act) if roundings else None,
                                   num.float_zero_dtype)
            cmp = tol.compare_exact(y, y_ref.to(act))
        else:
            y_ref = reference_gemm(x, w)
            W64 = w.dequantize(torch.float64)
            zs = None
            if num.dequant_roundings == 2:  # the pre-rounded zero term's own magnitude (docs/tolerance.md)
                ZS = w.zero_term(num.float_zero_dtype is not None)[w.group_of_row()]
                zs = (x.double().abs() @ ZS.abs(), tol.l2_bound(x, ZS))
            # act-order kernels permute K, so natural-order block partials are not theirs: the model falls back
            cmp = tol.compare_statistical(y, y_ref, abs_bound(x, w), tol.error_model_for(kernel, config, act, case.M),
                                          case.K, R=tol.l2_bound(x, W64), xw=None if case.act_order else (x, W64),
                                          zs=zs)
            if inexact is not None:
                cmp.detail = f"{inexact}; judged by the declared error model: {cmp.detail}"
                cmp.metrics["exact_judged_statistically"] = True
        cmp.metrics["deterministic"] = same
        if not raw.is_contiguous():  # right values in an unusual layout: judged, and said (a flat view misreads it)
            cmp.metrics["contiguous"] = False
            note += (f"; output not contiguous (strides {tuple(raw.stride())}, expected "
                     f"{tuple(raw.contiguous().stride())})")
        return Grade(cmp.ok and same, cmp.metrics, cmp.detail), note

    # ---- contract checks and the CLI ----------------------------------------------------------------------------
    def contract_config(self, spec: dict) -> W4A16Config:
        return W4A16Config(weight_type=spec["wtype"], group_size=spec["group_size"], act_order=spec["act_order"],
                           dtype=spec["dtype"], format=spec["format"], N=spec["N"], K=spec["K"])

    def contract_inputs(self, kernel, spec: dict, ctx=None) -> tuple:
        """Canonical weight -> codec -> the kernel's own load (API v2: with ctx, default RunContext.here);
        seeded normal activations."""
        from conformance.core.kernel import kernel_load
        from references import codecs
        from references.generators import random_activations, random_canonical

        dtype, seed = torch_dtype(spec["dtype"]), spec["seed"]
        w = random_canonical(spec["K"], spec["N"], spec["group_size"], spec["wtype"], dtype, "normal", seed,
                             act_order=spec["act_order"])
        operands = kernel_load(kernel, kernel.intake.restrict(codecs.encode(w, spec["format"])), ctx,
                               self.contract_config(spec))
        return operands, random_activations(spec["M"], spec["K"], dtype, "normal", seed)

    # a contract spec's keys as case fields: a contract failure's check id (conformance.cases.check_ids)
    contract_spec_fields = (("M", "M"), ("N", "N"), ("K", "K"), ("group_size", "group_size"),
                            ("wtype", "weight_type"), ("act_order", "act_order"), ("dtype", "dtype"),
                            ("format", "format"))

    def contract_specs(self):
        """Small specs: multi-tile N, split-K decode rows, odd M tails (act-order AWQ does not exist)."""
        from hypothesis import strategies as st

        return st.fixed_dictionaries({
            "M": st.sampled_from([1, 3, 17, 33]), "K": st.sampled_from([128, 256]), "N": st.sampled_from([64, 264]),
            "group_size": st.sampled_from([32, 64, 128, -1]), "wtype": st.sampled_from(["uint4b8", "uint4"]),
            "dtype": st.sampled_from(["float16", "bfloat16"]), "act_order": st.booleans(),
            "format": st.sampled_from(["gptq_v2", "awq", "compressed_tensors"]), "seed": st.integers(0, 2**16),
        }).filter(lambda s: not (s["act_order"] and s["format"] == "awq"))

    def contract_representatives(self) -> tuple:
        base = {"M": 5, "K": 256, "N": 256, "group_size": 128, "wtype": "uint4", "dtype": "float16",
                "act_order": False, "format": "gptq_v2", "seed": 1}
        return base, dict(base, act_order=True)

    def contract_alternates(self, spec: dict, accepts) -> list:
        """The other dtype and the no-zeros (uint4b8) path, when the gate accepts them."""
        alt = dict(spec, dtype="bfloat16", wtype="uint4b8", M=1)
        return [alt] if accepts(alt) else []

    def config_from_args(self, args) -> W4A16Config:
        """The config `select`'s flags describe; a missing or bad value raises InvalidInput naming the field."""
        if args.weight_type is None:
            raise InvalidInput("--weight-type", None, f"one of {sorted(SCALAR_TYPES)}")
        kw = {k: v for k, v in (("format", args.format), ("N", args.n), ("K", args.k)) if v is not None}
        if args.dtype not in ACT_DTYPES:  # checked here too so the message lists only what w4a16 allows
            raise InvalidInput("dtype", args.dtype, f"one of {sorted(ACT_DTYPES)}")
        return W4A16Config(args.weight_type, args.group_size, bool(args.act_order), args.dtype, **kw)

    # ---- the CI plan (conformance/cases/plan.py): plan classes, shape menus, one plan case -----------------------
    # A plan class folds the config axis group_size into its group REGIME on the kernel's K tile (a group smaller
    # than BLOCK_K is where the BLOCK_K clamp lives, vllm#39705); everything else is a config axis as is.
    plan_axes = ("weight_type", "format", "act_order", "group", "dtype")
    # CPU seconds of one plan case by run mode (small shapes; measured, docs/ci-plan.md): the plan's cost model
    plan_seconds = {"device": 0.01, "model": 0.03, "interpreter": 0.22}
    PLAN_N_GENERIC = (136, 24, 72, 8, 40, 64, 128)  # no tile table: N % 32 != 0 first, multiples of 32 last
    PLAN_K_TILE_GENERIC = 64  # no tile table: the K tile a group must undercut to be "sub_tile"

    def plan_class(self, cls, tiles) -> tuple:
        """The plan class of config class `cls` on `tiles` (plan.Tiles): its values along plan_axes."""
        g = cls.group_size
        if g == -1:
            regime = "channelwise"
        elif g == "K":
            regime = "one_group"
        else:
            regime = "sub_tile" if g < (tiles.block_k or self.PLAN_K_TILE_GENERIC) else "several_groups"
        return (cls.weight_type, cls.format, cls.act_order, regime, cls.dtype)

    def plan_label(self, pclass) -> str:
        wt, fmt, ao, regime, dt = pclass
        return f"{wt} {fmt} {'ao' if ao else 'noao'} {regime} {SHORT[dt]}"

    def plan_menus(self, tiles) -> dict:
        """Boundary menus the plan rotates through, one value per row: M (tails around the tile table's BLOCK_M
        and path thresholds), N (N tails: not a multiple of BLOCK_N, N % 32 != 0); K: the index of the row's K
        variant (_plan_k_choices), rotated per group regime (plan_k_key)."""
        bn = tiles.block_n
        ns = (bn + 8, 136, 24, 72, 8, bn, 64) if bn else self.PLAN_N_GENERIC
        return {"M": tiles.m_menu, "N": tuple(dict.fromkeys(n for n in ns if n % 8 == 0)), "K": tuple(range(4))}

    def plan_weight(self, pclass) -> int:
        """How much of the load step a class exercises, for ordering ties: zero points stored (uint4, uint8: the
        zeros' layout and v1's borrow), several groups per column (scale and zero indexing), act-order (g_idx)."""
        wt, _fmt, ao, regime, _dt = pclass
        return (wt in ("uint4", "uint8")) + (regime in ("several_groups", "sub_tile")) + bool(ao)

    def plan_k_key(self, pclass) -> str:
        """Rows of one group regime take its K variants in turn (so each regime meets all of them)."""
        return pclass[3]

    def _plan_k_choices(self, cls, tiles, large: str | None) -> list[tuple[int, int]]:
        """(group_size, K) candidates of config class `cls`, the preferred first. Tails: K not a multiple of the
        K tile, K / group odd, the smallest K (8, 16: tl.dot needs K >= 16 on a GPU); `large`: 'device' K
        4096-8192, 'interpreter' K 1024-1408 (a few rows per plan: cheap where the kernel runs as torch, about
        half a CPU second in the interpreter)."""
        bk = tiles.block_k or self.PLAN_K_TILE_GENERIC
        g = cls.group_size
        if large:
            ks = (4224, 8064, 6152, 4096) if large == "device" else (1032, 1160, 1288)
            if g in (-1, "K"):
                return [(K if g == "K" else -1, K) for K in ks]
            return [(g, K // g * g + (g if (K // g) % 2 == 0 else 0)) for K in ks]
        if g == -1:
            return [(-1, K) for K in (bk + 8, 16, 2 * bk + 8, 8)]
        if g == "K":
            return [(K, K) for K in (bk + 8, 16, 2 * bk + 8, 40, 32, 64, 128, 256)]
        return [(g, g * n) for n in (3, 5, 2)]  # K / group odd first (a K tail for every group < K tile)

    def plan_case(self, kernel, target, tier: str, members: list, picks: dict, tiles, large: str | None = None):
        """Case fields (all but regime, tier, seed) of one plan row: the first (config class, K, N) the kernel's
        gate accepts on `target`, starting from the row's picks, within the exact tier's K limits for the row's
        data regime; None when no candidate is accepted. `members`: the config classes of the row's plan class;
        `picks`: {"M", "N", "K", "regime"} (K: an index into the K candidates; regime: default the first of the
        tier's) and `large` as in _plan_k_choices."""
        from references.generators import exact_tier_max_k

        M = picks["M"]
        regime = picks.get("regime") or self.tier_regimes(tier)[0]
        # two fallback N (multiples of 32) for gates that refuse the picked N: enough, and gate calls stay few
        ns = [picks["N"]] + [n for n in (64, 128) if n != picks["N"]]
        for cls in _rotate(members, picks["K"]):
            for g, K in _rotate(self._plan_k_choices(cls, tiles, large), picks["K"]):
                if tier == "exact":
                    cap = min(exact_tier_max_k(cls.weight_type, regime=regime),
                              kernel.numerics(None).exact_tier_max_k or K)
                    if K > cap:
                        continue
                for N in ns:
                    if N == 8 and g > 0 and K // g > 1:
                        continue  # one zeros word per group row: [N/8, G] and [G, N/8] are one layout at N = 8
                    try:
                        config = W4A16Config(weight_type=cls.weight_type, group_size=g, act_order=cls.act_order,
                                             dtype=cls.dtype, format=cls.format, N=N, K=K).check_layer()
                    except InvalidInput:
                        break
                    if kernel.can_implement(config, target) is not None:
                        continue
                    if tier == "exact" and exact_limit_reason(kernel.numerics(config, M), cls.weight_type, K, M,
                                                              regime):
                        break  # this K is past the declared accumulators' exact range at this M
                    return {"M": M, "N": N, "K": K, "group_size": g, "weight_type": cls.weight_type,
                            "act_order": cls.act_order, "dtype": cls.dtype, "format": cls.format}
        return None

    # Kernel paths (plan.py, "paths"): every path a kernel takes meets every checkpoint format and weight type (each
    # path prepares and reads the operands its own way: planar weights and act-dtype zeros, or packed b_q and
    # qzeros), and every act dtype, group regime and act-order value at least once.
    plan_path_cross = ("format", "weight_type")
    plan_path_pairs = ("dtype", "group", "act_order")
    PLAN_PATH_N = (8, 16, 64, 128)  # the smallest N first; 64 and 128 for gates that want whole tiles

    def plan_path_shapes(self, kernel, target, tier: str, members: list, tiles) -> list:
        """Case fields (M = 1: the plan probes the rows) of the smallest shapes of a plan class the gate accepts,
        smallest first: per config class (smallest group first) the least K of its regime (8 channelwise, 16 one
        group, two groups) and one K past the kernel's K tile (a second K tile: where split-K paths start; three
        groups of a group at least the K tile: an odd tile count, which a split of 2 does not divide), each
        at the least N the gate accepts (N >= 16 with several groups, as in plan_case). Within the exact tier's
        K limit for the tier's widest data regime (plan_row_limit checks the row's own)."""
        bk = tiles.block_k or self.PLAN_K_TILE_GENERIC
        out = []
        for cls in sorted(members, key=lambda c: c.group_size if isinstance(c.group_size, int) else 0):
            g = cls.group_size
            gks = ([(-1, 8), (-1, bk + 8)] if g == -1 else [(16, 16), (bk + 8, bk + 8)] if g == "K"
                   else [(g, 2 * g), (g, g * (bk // g + 1))] if g < bk else [(g, 2 * g), (g, 3 * g)])
            cap = None
            if tier == "exact":
                cap = min(max(exact_tier_max_k(cls.weight_type, regime=r) for r in self.tier_regimes(tier)),
                          kernel.numerics(None).exact_tier_max_k or 1 << 30)
            for gs, K in dict.fromkeys(gks):
                if cap is not None and K > cap:
                    continue
                for N in self.PLAN_PATH_N:
                    if N == 8 and gs > 0 and K // gs > 1:
                        continue  # [N/8, G] and [G, N/8] zeros are one layout at N = 8
                    try:
                        config = W4A16Config(weight_type=cls.weight_type, group_size=gs, act_order=cls.act_order,
                                             dtype=cls.dtype, format=cls.format, N=N, K=K).check_layer()
                    except InvalidInput:
                        break
                    if kernel.can_implement(config, target) is None:
                        out.append({"M": 1, "N": N, "K": K, "group_size": gs, "weight_type": cls.weight_type,
                                    "act_order": cls.act_order, "dtype": cls.dtype, "format": cls.format})
                        break
        return sorted(out, key=lambda f: (self.plan_size(f), f["K"]))

    def plan_size(self, fields: dict) -> int:
        return fields["N"] * fields["K"]

    def plan_path_fit(self, fields: dict) -> bool:
        """A weight type with stored zero points shows how a path reads them (the format's zeros layout, AWQ's
        nibble order, v1's +1) only with two groups and two zeros words (N >= 16): with one group every zero point
        is a trap value, the same across each packed word (references.generators.zero_point_traps)."""
        if SCALAR_TYPES[fields["weight_type"]].has_bias():
            return True
        g = fields["group_size"]
        return g != -1 and fields["K"] // g >= 2 and fields["N"] >= 16

    def plan_row_limit(self, kernel, tier: str, fields: dict, regime: str) -> str | None:
        """The exact tier's K limits for the row's data regime and M (None: the row can run under it)."""
        if tier != "exact":
            return None
        K, wt = fields["K"], fields["weight_type"]
        cap = min(exact_tier_max_k(wt, regime=regime), kernel.numerics(None).exact_tier_max_k or K)
        if K > cap:
            return f"K={K} is past the exact tier's limit {cap} for {wt} under {regime}"
        config = W4A16Config(weight_type=wt, group_size=fields["group_size"], act_order=fields["act_order"],
                             dtype=fields["dtype"], format=fields["format"], N=fields["N"], K=K)
        return exact_limit_reason(kernel.numerics(config, fields["M"]), wt, K, fields["M"], regime)

    def plan_large_menus(self, mode: str) -> dict:
        """M and N of the large-K rows: small, so K 4096-8192 stays cheap (K 1024-1408 in the interpreter)."""
        return {"M": (1, 3), "N": (24, 8, 64)} if mode != "interpreter" else {"M": (1, 2), "N": (16, 8)}

    def plan_first_regime(self, fields: dict, tier: str) -> str | None:
        """A regime the first row with these fields must get: bf16 statistical rows meet extreme_scales once
        (bf16's range is what a dequant through fp16 loses)."""
        if tier == "statistical" and fields["dtype"] == "bfloat16" and "extreme_scales" in self.tier_regimes(tier):
            return "extreme_scales"
        return None


def exact_limit_reason(num, weight_type: str, K: int, M: int | None, regime: str = "exact") -> str | None:
    """Why `regime`'s exact-tier data is not summed exactly under the declared accumulation at this K and M (None:
    it is).

    Exact-tier partial sums stay within exact_tier_max_k's bound for the regime in any order, so a sum over more
    than one block is exact while K fits the outer dtype, one block while K fits the inner. Only accumulators
    narrower than fp32 change anything: kernels declaring fp32 are judged bit for bit."""
    from references.generators import exact_tier_max_k

    inner, block, outer = num.accumulation
    dtype = outer if block is not None and K > block and outer is not None else inner
    limit = exact_tier_max_k(weight_type, dtype, regime)
    if K <= limit or limit >= exact_tier_max_k(weight_type, regime=regime):
        return None
    return (f"exact tier not bit-exact at M={M}, K={K}: declared accumulation {tuple(num.accumulation)} holds "
            f"{regime} sums only up to K={limit}")



def _k_candidates(group_kind, k_max: int) -> list[int]:
    """K values (multiples of 8 and of the group) up to k_max, smallest first; K == group first."""
    if group_kind == "K" or group_kind == -1:
        return list(range(8, k_max + 1, 8))
    step = group_kind * 8 // math.gcd(group_kind, 8)
    return list(range(step, k_max + 1, step))


def _k_cap(family, k, tier: str, k_max: int, cls) -> int:
    """The largest K a class's scan probes: k_max; for the exact tier the largest K some exact regime holds (draw_case
    keeps the regimes valid at K) and the kernel's declared exact limit."""
    from references.generators import exact_tier_max_k

    if tier != "exact":
        return k_max
    wide = max(exact_tier_max_k(cls.weight_type, regime=r) for r in family.tier_regimes("exact"))
    return min(k_max, wide, k.numerics(None).exact_tier_max_k or k_max)


def _accepted_ks(family, kernel_name: str, target, tier: str, k_max: int, n_max: int, cls, past: int = 0):
    """The gate-accepted K values of `cls` (smallest first, lazily: gates are pure, so a caller that needs only
    the first stops the scan there); `past`: only the K values above it."""
    from conformance.core import registry

    k = registry.get_kernel(kernel_name)
    n_probe = sorted({8, 64 if n_max >= 64 else 8, n_max // 8 * 8})
    return (K for K in _k_candidates(cls.group_size, _k_cap(family, k, tier, k_max, cls)) if K > past
            and any(k.can_implement(family.config(cls, N, K), target) is None for N in n_probe))


# (family, kernel name, target, k_max, n_max) -> (the kernel object scanned, the classes the exact tier's scan
# accepted, each class's exact K cap); a kernel registered anew under the name is scanned anew
_EXACT_SCANS: dict = {}


@functools.cache
def _w4a16_classes(family, kernel_name: str, target, tier: str, k_max: int, n_max: int) -> tuple:
    """The strategy classes with at least one gate-accepted K. Each class's scan stops at its first accepted K:
    every xdist worker pays this at collection, and the full K list is needed only for a class a draw picked.
    The statistical tier reuses an exact scan of the same kernel and target: that scan walked each class's K
    candidates up to the class's exact cap, a prefix of the statistical tier's candidates, so a class it accepted is
    accepted here (at the same K) and another needs only the K values past the cap (gates are pure). Not after the
    gate hung: from then on it refuses everything, so the statistical tier scans anew and sees that."""
    from conformance.core import registry

    classes = family.config_classes(**family.STRATEGY_VALUES)
    key = (family, kernel_name, target, k_max, n_max)
    k = registry.get_kernel(kernel_name)
    exact = _EXACT_SCANS.get(key) if tier == "statistical" and not registry.gate_hung(kernel_name) else None
    if exact is not None and exact[0] is k:
        _, accepted, caps = exact
        out = tuple(cls for cls in classes if cls in accepted or next(
            _accepted_ks(family, kernel_name, target, tier, k_max, n_max, cls, past=caps[cls]), None) is not None)
    else:
        out = tuple(cls for cls in classes
                    if next(_accepted_ks(family, kernel_name, target, tier, k_max, n_max, cls), None) is not None)
    if tier == "exact":
        _EXACT_SCANS[key] = (k, frozenset(out), {cls: _k_cap(family, k, tier, k_max, cls) for cls in classes})
    return out


@functools.cache
def _w4a16_ks(family, kernel_name: str, target, tier: str, k_max: int, n_max: int, cls) -> tuple:
    """Every gate-accepted K of `cls` within the profile (the draw's K menu)."""
    return tuple(_accepted_ks(family, kernel_name, target, tier, k_max, n_max, cls))


def _w4a16_table(family, kernel_name: str, target, tier: str, k_max: int, n_max: int) -> tuple:
    """((class, (K, ...)), ...) for every strategy class with at least one gate-accepted K (gates are pure)."""
    return tuple((cls, _w4a16_ks(family, kernel_name, target, tier, k_max, n_max, cls))
                 for cls in _w4a16_classes(family, kernel_name, target, tier, k_max, n_max))


def _rotate(seq, start: int) -> list:
    """`seq` starting at index start % len(seq) (the CI plan's per-row rotation through a menu)."""
    seq = list(seq)
    i = start % len(seq) if seq else 0
    return seq[i:] + seq[:i]


FAMILY = W4A16Family()
