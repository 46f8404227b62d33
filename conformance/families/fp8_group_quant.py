"""The FP8 per-token-group activation quant family: x [tokens, hidden] -> (q fp8, scales fp32 per group)."""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

from conformance.core.bits import as_bytes, bits_equal, nonfinite_problem
from conformance.core.dtypes import FP8_DTYPES, INPUT_DTYPES, LONG, SHORT, torch_dtype
from conformance.families import limits
from conformance.families.base import CaseField, Family, Grade
from conformance.families.fp8_inputs import FP8_REGIMES
from references.errors import require


@dataclass(frozen=True)
class Fp8QuantConfig:
    """Per-token-group FP8 activation quant of a [tokens, hidden] tensor."""

    group_size: int
    dtype: str
    fp8_dtype: str = "float8_e4m3fn"
    ue8m0: bool = False
    column_major_scales: bool = False
    hidden: int = 7168
    family = "fp8_group_quant"

    def __post_init__(self):
        limits.require_dim("group_size", self.group_size)
        require(self.dtype in INPUT_DTYPES, "dtype", self.dtype, f"one of {sorted(INPUT_DTYPES)}")
        require(self.fp8_dtype in FP8_DTYPES, "fp8_dtype", self.fp8_dtype, f"one of {sorted(FP8_DTYPES)}")
        # shared layer-dimension rules (conformance.families.limits): hidden a positive multiple of group_size
        limits.require_dim("hidden", self.hidden, multiple_of=self.group_size)

    def check_layer(self) -> Fp8QuantConfig:
        """The layer rules every command applies (the constructor already enforces them all). Returns self."""
        return self

    def to_dict(self) -> dict:
        return asdict(self)


class Fp8GroupQuantFamily(Family):
    """Everything the suite knows about the fp8_group_quant op family."""

    name = "fp8_group_quant"
    config_type = Fp8QuantConfig
    regimes = FP8_REGIMES  # references.generators' regimes plus saturation and fp8_boundaries
    case_fields = (
        CaseField("T", "tokens", int, "rows of x (tokens), positive"),
        CaseField("H", "hidden", int, "columns of x, a positive multiple of the group size"),
        CaseField("g", "group_size", int, "quantization group size along the hidden dim, positive"),
        CaseField("dt", "dtype", tuple(INPUT_DTYPES), "input dtype", fmt=SHORT.__getitem__, parse=LONG.__getitem__),
        CaseField("f8", "fp8_dtype", tuple(FP8_DTYPES), "fp8 output dtype", fmt=SHORT.__getitem__,
                  parse=LONG.__getitem__),
        CaseField("ue8m0", "ue8m0", bool, "scales rounded up to powers of two (UE8M0); 0 = plain fp32 scales",
                  default=False),
        CaseField("colmajor", "column_major_scales", bool, "scales stored column-major; 0 = row-major",
                  default=False),
    )
    # T5-H512-g128-bf16-e4m3fn-f32scale-rowmajor-<regime>-<tier>-s<seed>
    legacy_id_fields = ((0, "tokens", r"T([0-9]+)"), (1, "hidden", r"H([0-9]+)"), (2, "group_size", r"g([0-9]+)"),
                        (3, "dtype", r"([A-Za-z0-9_]+)"), (4, "fp8_dtype", r"([A-Za-z0-9_]+)"),
                        (5, "ue8m0", {"ue8m0": "1", "f32scale": "0"}),
                        (6, "column_major_scales", {"colmajor": "1", "rowmajor": "0"}))

    def validate_case(self, case) -> None:
        """FP8 rules across fields: tokens, hidden, group_size positive and hidden a multiple of group_size.
        Every regime is allowed in the exact tier (group quant is bit-exact on any data)."""
        for f in ("tokens", "hidden", "group_size"):
            require(getattr(case, f) > 0, f, getattr(case, f), "a positive int")
        limits.require_dim("tokens", case.tokens, limit=limits.MAX_ROWS)  # absurd sizes are bad ids, not crashes
        limits.require_dim("hidden", case.hidden)
        require(case.hidden % case.group_size == 0, "hidden", case.hidden,
                f"a multiple of group_size={case.group_size}")

    def config_from_case(self, case) -> Fp8QuantConfig:
        """The quant config a gate judges (tokens, the row count, is not part of it)."""
        return Fp8QuantConfig(group_size=case.group_size, dtype=case.dtype, fp8_dtype=case.fp8_dtype,
                              ue8m0=case.ue8m0, column_major_scales=case.column_major_scales, hidden=case.hidden)

    # ---- the config space ------------------------------------------------------------------------------------
    axes = (("group_size", (32, 64, 128)),
            ("dtype", ("bfloat16", "float16", "float32")),
            ("fp8_dtype", tuple(FP8_DTYPES)),
            ("ue8m0", (False, True)),
            ("column_major_scales", (False, True)))
    exclusions = ()
    probe_shapes = ({"hidden": 256}, {"hidden": 4096}, {"hidden": 7168})
    size_label = "tokens"
    folded = "input dtypes x scale layouts"
    prefill_m = 64
    bench_prefill_m = 1024
    cli_fields = ("fp8_dtype", "ue8m0", "column_major_scales", "hidden")

    def config(self, cls, hidden: int = 7168) -> Fp8QuantConfig:
        return Fp8QuantConfig(group_size=cls.group_size, dtype=cls.dtype, fp8_dtype=cls.fp8_dtype, ue8m0=cls.ue8m0,
                              column_major_scales=cls.column_major_scales, hidden=hidden)

    def class_label(self, config) -> str:
        return f"{config.fp8_dtype} g{config.group_size}{' ue8m0' if config.ue8m0 else ''}"

    def ledger_configs(self) -> list:
        return self.config_space(group_size=(128,), dtype=("bfloat16",), column_major_scales=(False,))

    def ledger_label(self, config) -> str:
        return f"fp8 g{config.group_size} {config.dtype} {config.fp8_dtype}{' ue8m0' if config.ue8m0 else ''}"

    def representative_config(self) -> Fp8QuantConfig:
        return Fp8QuantConfig(group_size=128, dtype="bfloat16", hidden=512)

    def platform_fp8_dtypes(self, target) -> tuple[str, ...]:
        """The fp8 dtypes a model asks for on `target`: e4m3fnuz on gfx94x, e4m3fn on other GPUs, both on cpu.
        Sweeping the other one would report gaps no model can hit."""
        if target.is_cpu:
            return tuple(FP8_DTYPES)
        return ("float8_e4m3fnuz",) if target.gfx_family == "gfx94" else ("float8_e4m3fn",)

    def coverage_configs(self, kernels, target, hidden: int = 7168, **_) -> tuple[list, list]:
        """fp8 dtype x group x UE8M0 x input dtype x scale layout, for the target's fp8 dtypes only."""
        fp8s = self.platform_fp8_dtypes(target)
        configs = self.config_space({"hidden": hidden}, ("fp8_dtype", "group_size", "ue8m0", "dtype",
                                                         "column_major_scales"),
                                    group_size=(32, 64, 128), dtype=("float16", "bfloat16", "float32"),
                                    fp8_dtype=fp8s)
        excluded = [{"what": f"fp8_group_quant with fp8_dtype {other}",
                     "why": f"models on {target} quantize to {fp8s[0]}"}
                    for other in sorted(set(FP8_DTYPES) - set(fp8s))]
        return configs, excluded

    # ---- strategies --------------------------------------------------------------------------------------------
    # the order of these values fixes which case a seed draws: reordering them changes every drawn case
    STRATEGY_VALUES = {"group_size": (128, 64)}

    def tier_regimes(self, tier: str) -> tuple:
        """Group quant is bit-exact on any data, so both tiers draw every fp8 regime."""
        return self.regimes

    def accepted_classes(self, kernel, target, tier: str, profile) -> list:
        return [c for c, _ in _fp8_table(self, kernel.name, target, profile.hidden_max)]

    def draw_case(self, draw, kernel, target, tier: str, profile) -> dict:
        from hypothesis import strategies as st

        from conformance.families.draws import m_values, seeds

        table = _fp8_table(self, kernel.name, target, profile.hidden_max)
        if not table:
            raise ValueError(f"kernel={kernel.name!r} accepts no fp8_group_quant class on target={target} "
                             f"within profile {profile.name}")
        cls, hs = draw(st.sampled_from(table))
        return {"regime": draw(st.sampled_from(self.tier_regimes(tier))), "seed": draw(seeds()),
                "group_size": cls.group_size, "dtype": cls.dtype, "tokens": draw(m_values(profile.tokens_max)),
                "hidden": draw(st.sampled_from(hs)), "fp8_dtype": cls.fp8_dtype, "ue8m0": cls.ue8m0,
                "column_major_scales": cls.column_major_scales}

    def any_case_fields(self):
        from hypothesis import strategies as st

        from conformance.families.draws import seeds

        return st.builds(
            lambda tier, reg, seed, g, mult, T, dt, f8, ue, cm: dict(
                regime=reg, tier=tier, seed=seed, group_size=g, dtype=dt, tokens=T, hidden=g * mult, fp8_dtype=f8,
                ue8m0=ue, column_major_scales=cm),
            st.sampled_from(("exact", "statistical")), st.sampled_from(self.regimes), seeds(),
            st.sampled_from((32, 64, 128)), st.integers(1, 64), st.integers(1, 4096),
            st.sampled_from(("bfloat16", "float16", "float32")), st.sampled_from(tuple(FP8_DTYPES)), st.booleans(),
            st.booleans())

    # ---- corpus --------------------------------------------------------------------------------------------------
    CORPUS_SHAPES = ((5, 256, "exact", "fp8_boundaries"), (17, 512, "statistical", "normal"),
                     (1, 256, "statistical", "saturation"))  # (tokens, hidden, tier, regime)

    def corpus_classes(self) -> list[tuple]:
        out = []
        for c in self.config_classes(group_size=(64, 128)):
            label = (f"g{c.group_size} {c.dtype} {c.fp8_dtype.removeprefix('float8_')}{' ue8m0' if c.ue8m0 else ''}"
                     f"{' colmajor' if c.column_major_scales else ''}")
            out.append((label, tuple(c._asdict().items())))
        return out

    def corpus_case_fields(self, fields: dict, seed0: int) -> list[dict]:
        return [dict(regime=regime, tier=tier, seed=seed0 + i, tokens=T, hidden=H, **fields)
                for i, (T, H, tier, regime) in enumerate(self.CORPUS_SHAPES)]

    # ---- running and grading ------------------------------------------------------------------------------------
    def exact_unjudgeable(self, numerics) -> str | None:
        from references.fp8 import FP8_SCALE_CONVENTIONS, ZERO_GROUP_POLICIES

        policy = numerics.zero_group_policy
        if policy is not None and policy not in ZERO_GROUP_POLICIES:
            return (f"exact tier not applicable: zero_group_policy={policy!r} has no bit-exact reference "
                    f"(reference conventions: {list(ZERO_GROUP_POLICIES)}); judged in the statistical tier")
        if numerics.fp8_scale not in FP8_SCALE_CONVENTIONS:
            return (f"exact tier not applicable: fp8_scale={numerics.fp8_scale!r} is not bit-exact "
                    f"(reference conventions: {list(FP8_SCALE_CONVENTIONS)}); judged in the statistical tier")
        return None

    def run(self, case, kernel, config, ex) -> tuple:
        """Activations from the seed (fp8 regimes included), quantized by the kernel, graded by `grade`."""
        from conformance.families.fp8_inputs import fp8_activations

        x = fp8_activations(case.tokens, case.hidden, case.dtype, case.regime, case.seed, case.group_size,
                            case.fp8_dtype)
        params = ex.load(config)
        xd = x.to(ex.device)
        raw = ex.call(params, xd)
        col_strides = raw[1].stride() if isinstance(raw, (tuple, list)) and len(raw) == 2 else None
        out = ex.to_cpu(raw)
        problem = self.output_problem(config, x, out, col_strides)
        if problem:
            return Grade(False, {}, problem), ""
        same, note = ex.determinism(params, xd, out, config, case.tokens)
        return self.grade(kernel, config, x, out, params, case.tier, same=same), note

    def output_problem(self, config, x, out, col_strides=None) -> str | None:
        """What is wrong with the output's structure (type, dtypes, shapes, scale strides), or None."""
        import torch

        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            return f"output is {type(out).__name__}, not (q, scales)"
        q, s = out
        tokens, G = x.shape[0], config.hidden // config.group_size
        f8 = FP8_DTYPES[config.fp8_dtype]
        problems = []
        if q.dtype != f8 or tuple(q.shape) != tuple(x.shape):
            problems.append(f"q is {q.dtype}{tuple(q.shape)}, expected {f8}{tuple(x.shape)}")
        if s.dtype != torch.float32 or tuple(s.shape) != (tokens, G):
            problems.append(f"scales are {s.dtype}{tuple(s.shape)}, expected float32{(tokens, G)}")
        if problems:
            return "; ".join(problems)
        if (config.column_major_scales and col_strides is not None and tokens > 1 and G > 1
                and tuple(col_strides) != (1, tokens)):
            return f"scales strides {tuple(col_strides)}, expected column-major (1, {tokens})"
        return None

    def grade(self, kernel, config, x, out, params, tier: str, same: bool = True) -> Grade:
        """Compare (q, scales) with the reference under the kernel's zero-group policy. Exact tier: q and scales
        bit-exact; statistical: scales within 4 fp32 ulp and q within one fp8 step of x / s (correct rounding
        gives half a step). metrics["max_ratio"]: fp8 steps over the tier's allowance. The bench's correctness
        gate is this comparison's statistical tier."""
        import torch

        from references.fp8 import (
            FP8_MAX,
            FP8_SCALE_CONVENTIONS,
            fp8_group_quant_reference,
            group_scales_raw,
            ue8m0_ambiguous,
        )

        problem = self.output_problem(config, x, out)
        if problem:
            return Grade(False, {}, problem)
        q, s = (t.detach().cpu() for t in out)
        x = x.detach().cpu()
        tokens, gs = x.shape[0], config.group_size
        G = config.hidden // gs
        num = kernel.numerics(config, tokens)
        policy = num.zero_group_policy or "triton"
        # the declared scale convention when it is bit-exact; an approximate reciprocal is compared with the
        # divided scale (statistical tier only: exact_unjudgeable)
        conv = num.fp8_scale if num.fp8_scale in FP8_SCALE_CONVENTIONS else "divide"
        # a kernel with its own convention (no reference policy) is compared with the reference's scale formula
        # at its declared fp8_max, statistical tier only (exact_unjudgeable)
        own = self.exact_unjudgeable(kernel.numerics(config)) is not None
        fp8_max = float(params.fp8_max) if own else FP8_MAX[config.fp8_dtype]
        if own:
            amax = x.float().reshape(tokens, -1, gs).abs().amax(-1)
            s_ref = group_scales_raw(amax, fp8_max, float(params.eps), "triton", conv)
            q_ref = torch.zeros(x.shape, dtype=FP8_DTYPES[config.fp8_dtype])
            policy = "triton"  # only for the UE8M0 ambiguity probe below; such kernels refuse UE8M0 today
        else:
            q_ref, s_ref = fp8_group_quant_reference(x, gs, config.fp8_dtype, config.ue8m0,
                                                     config.column_major_scales, zero_group_policy=policy,
                                                     fp8_scale=conv)
        # NaN/Inf fail in both tiers unless the reference holds the identical value (never: x is finite)
        for what, got, ref in (("scales", s, s_ref), ("q", q, q_ref)):
            nonfinite = nonfinite_problem(got, ref)
            if nonfinite is not None:
                return Grade(False, {"deterministic": same}, f"{what}: {nonfinite}")
        qf = q.to(torch.float64)
        # groups where UE8M0 rounding may legitimately go down (fp32 log2 at a power of two): allow ref or ref/2
        ambiguous = torch.zeros_like(s_ref, dtype=torch.bool)
        if config.ue8m0:
            amax = x.float().reshape(tokens, G, gs).abs().amax(-1)
            ambiguous = ue8m0_ambiguous(group_scales_raw(amax, fp8_max, 1e-10, policy, conv))
        s64, sr64 = s.double(), s_ref.double()
        scale_ok = (s64 == sr64) | (ambiguous & (s64 == sr64 / 2))
        # dequantized error in units of one fp8 step at the quantized value: correct rounding gives <= 1/2
        xs = x.double() / s64.repeat_interleave(gs, dim=-1)
        err_units = (qf - xs.clamp(-fp8_max, fp8_max)).abs() / fp8_spacing(xs, config.fp8_dtype)
        flat = int(err_units.flatten().argmax()) if err_units.numel() else 0
        worst = [int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(q.shape))]
        n_q_diff = int((as_bytes(q) != as_bytes(q_ref)).sum())
        metrics = {"max_ratio": float(err_units.max()) * 2 if err_units.numel() else 0.0, "q_mismatches": n_q_diff,
                   "scale_mismatches": int((~(s64 == sr64)).sum()), "worst_index": worst, "deterministic": same,
                   "zero_group_policy": policy, "fp8_scale": num.fp8_scale}
        if tier == "exact":
            ok = n_q_diff == 0 and bits_equal(s.contiguous(), s_ref.contiguous())
            if not ok and bool(scale_ok.all()) and bool(ambiguous.any()):
                ok = metrics["max_ratio"] <= 1.0  # only ambiguous UE8M0 groups differ: judge q by rounding
            detail = ("q and scales bit-exact" if ok else
                      f"{n_q_diff} q bytes and {metrics['scale_mismatches']} scales differ from the reference "
                      f"(policy {policy}, fp8_scale {conv}); worst q at {worst}: got {float(qf.flatten()[flat])}, "
                      f"ref {float(q_ref.to(torch.float64).flatten()[flat])}, x/scale {float(xs.flatten()[flat]):.6g}")
        else:
            # scales within 4 fp32 ulp (GPU fp32 division is not correctly rounded), q within one fp8 step
            rel = ((s64 - sr64).abs() / sr64.clamp(min=1e-45)).where(~ambiguous, torch.zeros_like(s64))
            s_close = bool((rel <= 4 * 2.0 ** -24).all()) and bool(scale_ok[ambiguous].all())
            ok = s_close and metrics["max_ratio"] <= 2.0
            metrics["max_ratio"] /= 2  # ratio to the statistical bound of one fp8 step
            metrics["scale_rel_err"] = float(rel.max()) if rel.numel() else 0.0
            detail = (f"max |q - x/s| = {metrics['max_ratio']:.3g} fp8 steps at {worst}; "
                      f"scales {'within 4 ulp' if s_close else 'differ by more than 4 ulp'} (policy {policy})")
        if math.isnan(metrics["max_ratio"]):
            ok = False
        return Grade(ok and same, metrics, detail)

    # ---- contract checks and the CLI ----------------------------------------------------------------------------
    def contract_config(self, spec: dict) -> Fp8QuantConfig:
        return Fp8QuantConfig(group_size=spec["group_size"], dtype=spec["dtype"], fp8_dtype=spec["fp8_dtype"],
                              ue8m0=spec["ue8m0"], column_major_scales=spec["column_major"], hidden=spec["K"])

    def contract_inputs(self, kernel, spec: dict, ctx=None) -> tuple:
        """The kernel's params from its own load (API v2: with ctx, default RunContext.here); x = 3 * normal,
        seeded."""
        import torch

        from conformance.core.kernel import kernel_load

        operands = kernel_load(kernel, self.contract_config(spec), ctx)
        gen = torch.Generator().manual_seed(spec["seed"])
        return operands, (torch.randn((spec["M"], spec["K"]), generator=gen) * 3).to(torch_dtype(spec["dtype"]))

    # a contract spec's keys as case fields: a contract failure's check id (conformance.cases.check_ids)
    contract_spec_fields = (("M", "tokens"), ("K", "hidden"), ("group_size", "group_size"), ("dtype", "dtype"),
                            ("fp8_dtype", "fp8_dtype"), ("ue8m0", "ue8m0"), ("column_major", "column_major_scales"))

    def contract_specs(self):
        from hypothesis import strategies as st

        return st.fixed_dictionaries({
            "M": st.sampled_from([1, 3, 17]), "K": st.sampled_from([128, 256]),
            "group_size": st.sampled_from([64, 128]),
            "dtype": st.sampled_from(["float16", "bfloat16", "float32"]),
            "fp8_dtype": st.sampled_from(["float8_e4m3fn", "float8_e4m3fnuz"]), "ue8m0": st.booleans(),
            "column_major": st.booleans(), "seed": st.integers(0, 2**16)})

    def contract_representatives(self) -> tuple:
        return ({"M": 5, "K": 256, "group_size": 128, "dtype": "bfloat16", "fp8_dtype": "float8_e4m3fn",
                 "ue8m0": False, "column_major": False, "seed": 1},)

    def contract_alternates(self, spec: dict, accepts) -> list:
        """Column-major UE8M0 scales: their own strides (run even where the gate refuses them, as opcheck checks
        the op's registration, not its numbers)."""
        return [dict(spec, column_major=True, ue8m0=True)]

    def config_from_args(self, args) -> Fp8QuantConfig:
        """The config `select`'s flags describe; a bad value raises InvalidInput naming the field the user typed: a
        group size that does not divide the default hidden is the group size's fault, not --hidden's."""
        kw = {k: v for k, v in (("fp8_dtype", args.fp8_dtype), ("hidden", args.hidden)) if v is not None}
        if args.hidden is None:
            hidden = Fp8QuantConfig.hidden
            limits.require_dim("group_size", args.group_size)
            require(hidden % args.group_size == 0, "group_size", args.group_size,
                    f"a positive divisor of --hidden={hidden} (the default; give --hidden to set another)")
        return Fp8QuantConfig(args.group_size, args.dtype, ue8m0=bool(args.ue8m0),
                              column_major_scales=bool(args.column_major_scales), **kw)

    # ---- the CI plan (conformance/cases/plan.py): plan classes, shape menus, one plan case -----------------------
    # every config axis is a plan axis: fp8 dtype x scale layout x UE8M0 x input dtype x group
    plan_axes = ("fp8_dtype", "column_major_scales", "ue8m0", "dtype", "group_size")
    # CPU seconds of one plan case by run mode (small shapes; measured, docs/ci-plan.md): the plan's cost model
    plan_seconds = {"device": 0.01, "model": 0.01, "interpreter": 0.3}
    # groups per row (hidden = group x G): odd counts, one group, and 9 (past 8 groups per program: a tail tile)
    PLAN_GROUPS_PER_ROW = (3, 1, 5, 9, 2)

    def plan_class(self, cls, tiles) -> tuple:
        return (cls.fp8_dtype, cls.column_major_scales, cls.ue8m0, cls.dtype, cls.group_size)

    def plan_label(self, pclass) -> str:
        f8, cm, ue, dt, g = pclass
        return f"{SHORT[f8]} {'colmajor' if cm else 'rowmajor'} {'ue8m0' if ue else 'f32scale'} {SHORT[dt]} g{g}"

    def plan_menus(self, tiles) -> dict:
        """Tokens up to 33 (more only add programs: the kernels' row tile is 1 up to 256 tokens) and the index of
        the row's group count."""
        return {"M": tuple(m for m in tiles.m_menu if m <= 33) or tiles.m_menu[:1],
                "K": tuple(range(len(self.PLAN_GROUPS_PER_ROW)))}

    def plan_weight(self, pclass) -> int:
        """For ordering ties: UE8M0 scales and column-major scale storage are the conventions kernels get wrong."""
        _f8, cm, ue, _dt, _g = pclass
        return int(cm) + int(ue)

    def plan_k_key(self, pclass) -> int:
        """Rows of one group size take the group counts in turn."""
        return pclass[4]

    def plan_case(self, kernel, target, tier: str, members: list, picks: dict, tiles, large: str | None = None):
        """Case fields (all but regime, tier, seed) of one plan row: tokens = picks["M"], hidden = group x a group
        count rotated from picks["K"] (`large`: hidden 4096-8192 on 'device', 1024-2048 in the 'interpreter', odd
        group counts); the first candidate the gate accepts, else None. Group quant is exact on any data, so the
        exact tier has no K limit (picks["regime"] is not read)."""
        cls = members[0]  # plan classes are config classes here
        g = cls.group_size
        if large:
            hs = (8192 - g, 4096 + 3 * g) if large == "device" else (1024 + g, 2048 - g)
        else:
            hs = tuple(g * n for n in self.PLAN_GROUPS_PER_ROW)
        start = picks["K"] % len(hs)
        for hidden in hs[start:] + hs[:start]:
            config = self.config(cls, hidden=hidden)
            if kernel.can_implement(config, target) is None:
                return {"tokens": picks["M"], "hidden": hidden, "group_size": g, "dtype": cls.dtype,
                        "fp8_dtype": cls.fp8_dtype, "ue8m0": cls.ue8m0, "column_major_scales": cls.column_major_scales}
        return None

    plan_rows_field = "tokens"

    def plan_path_shapes(self, kernel, target, tier: str, members: list, tiles) -> list:
        """Case fields (tokens = 1: the plan probes them) of one group and of 9 groups (past the 8 groups one
        program takes), where the gate accepts them, smallest first."""
        cls = members[0]
        out = []
        for n in (1, 9):
            config = self.config(cls, hidden=cls.group_size * n)
            if kernel.can_implement(config, target) is None:
                out.append({"tokens": 1, "hidden": config.hidden, "group_size": cls.group_size, "dtype": cls.dtype,
                            "fp8_dtype": cls.fp8_dtype, "ue8m0": cls.ue8m0,
                            "column_major_scales": cls.column_major_scales})
        return out

    def plan_size(self, fields: dict) -> int:
        return fields["hidden"]

    def plan_large_menus(self, mode: str) -> dict:
        return {"M": (1, 3)} if mode != "interpreter" else {"M": (1, 2)}

    def plan_first_regime(self, fields: dict, tier: str) -> str | None:
        return None


def fp8_spacing(v, fp8_dtype: str):
    """The gap between adjacent fp8 values around |v| (fp64): 2^(max(floor(log2|v|), emin) - 3)."""
    import torch

    emin = -6 if fp8_dtype == "float8_e4m3fn" else -7
    e = torch.floor(torch.log2(v.abs().clamp(min=2.0 ** (emin - 10)))).clamp(min=emin)
    return torch.pow(2.0, e - 3)


@functools.cache
def _fp8_table(family, kernel_name: str, target, hidden_max: int) -> tuple:
    """((class, (hidden, ...)), ...) for every strategy class with a gate-accepted hidden (hidden == group too)."""
    from conformance.core import registry

    k = registry.get_kernel(kernel_name)
    out = []
    for cls in family.config_classes(**family.STRATEGY_VALUES):
        hs = tuple(h for h in range(cls.group_size, max(cls.group_size, hidden_max) + 1, cls.group_size)
                   if k.can_implement(family.config(cls, h), target) is None)
        if hs:
            out.append((cls, hs))
    return tuple(out)


FAMILY = Fp8GroupQuantFamily()
