"""`select`: which kernel serves one layer config on a target, and one reason per refused kernel.

Prints exactly `selected: NAME` (or `selected: none`) then `refused: NAME: REASON` per refusal, in
selection order; `--json` prints {"selected": ..., "refused": [{"kernel": ..., "reason": ...}]}.
"""
from __future__ import annotations

import json

from conformance.cli import _args
from references.errors import InvalidInput

NAME = "select"
HELP = "select the kernel for a config on a target and say why every other kernel refused"

# config field -> the flag that sets it, so errors name what the user typed
_FLAG = {"weight_type": "--weight-type", "group_size": "--group-size", "dtype": "--dtype", "format": "--format",
         "N": "--n", "K": "--k", "N, K": "--n, --k", "fp8_dtype": "--fp8-dtype", "hidden": "--hidden"}


def add_arguments(parser) -> None:
    _args.add_family(parser, default="w4a16")
    _args.add_target(parser)
    g = parser.add_argument_group("both families")
    g.add_argument("--group-size", type=int, default=None, metavar="G",
                   help="quant group size along K (w4a16: -1 = channelwise) or along hidden (fp8)")
    g.add_argument("--dtype", default="float16", help="activation dtype (default: %(default)s)")
    g = parser.add_argument_group("w4a16")
    g.add_argument("--weight-type", default=None, metavar="T", help="uint4, uint4b8, uint8, uint8b128")
    g.add_argument("--act-order", action="store_true", default=None, help="checkpoint has act-order (g_idx)")
    g.add_argument("--format", default=None, metavar="F",
                   help="checkpoint format: gptq_v1, gptq_v2, awq, compressed_tensors (default: gptq_v2)")
    g.add_argument("--n", type=int, default=None, metavar="N", help="output features (default 4096)")
    g.add_argument("--k", type=int, default=None, metavar="K", help="input features (default 4096)")
    g = parser.add_argument_group("fp8_group_quant")
    g.add_argument("--fp8-dtype", default=None, help="float8_e4m3fn (default) or float8_e4m3fnuz")
    g.add_argument("--ue8m0", action="store_true", default=None, help="scales rounded up to powers of two")
    g.add_argument("--column-major-scales", action="store_true", default=None, help="column-major scale layout")
    g.add_argument("--hidden", type=int, default=None, help="hidden size (default 7168)")
    _args.add_kernels(parser)
    parser.add_argument("--available-only", action="store_true",
                        help="also refuse kernels that cannot run on this machine")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _reject_foreign(args, names, family) -> None:
    for n in names:
        v = getattr(args, n)
        if v is not None:
            flag = "--" + n.replace("_", "-")
            raise InvalidInput(flag, v, f"not used by --family {family} (leave it out)")


def build_config(args):
    """The layer config the flags describe (the family's `config_from_args`); flags another family reads are
    refused, and bad values raise InvalidInput naming the flag."""
    from conformance.families import all_families, get_family

    fam = get_family(_args.check_family(args.family))
    if args.group_size is None:
        raise InvalidInput("--group-size", None, "an integer (w4a16: -1 for channelwise or > 0; fp8: > 0)")
    try:
        foreign = [f for other in all_families() if other is not fam for f in other.cli_fields
                   if f not in fam.cli_fields]
        _reject_foreign(args, foreign, fam.name)
        return fam.config_from_args(args).check_layer()  # the shared layer rules (conformance.families.limits)
    except InvalidInput as e:
        if e.field in _FLAG:
            raise InvalidInput(_FLAG[e.field], e.value, e.allowed) from None
        raise


def run(args) -> int:
    from conformance.core import registry

    config = build_config(args)
    target = _args.parse_target(args.target)
    kernels = None
    if args.kernels is not None:
        kernels = _args.resolve_kernels(args.kernels)
        other = [k.name for k in kernels if k.family != config.family]
        if other:
            raise InvalidInput("--kernels", args.kernels,
                               f"kernels of family {config.family!r} ({', '.join(other)} belong to another family)")
    sel = registry.select(config, target, kernels, require_available=args.available_only)
    if args.json:
        print(json.dumps(sel.to_dict()))
        return 0
    print(f"selected: {sel.selected.name if sel.selected else 'none'}")
    for name, reason in sel.refused.items():
        print(f"refused: {name}: {reason}")
    return 0
