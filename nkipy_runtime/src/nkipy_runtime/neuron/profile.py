"""What ``neuronx-cc`` accepts, per Trainium generation: the Neuron target profile.

No Neuron compiler runs where kernels are usually written, and the compiler's own answer comes
minutes into a compile; so nkipy holds the documented rules here, checks every module against
them before the compiler runs (``check``) and lets the planner keep an op the target cannot take
on CPU. Each rule names the public page it comes from (the aws-neuron-sdk documentation, under
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/); ``docs/runtimes.md`` lists them for
users, with what only ``neuronx-cc list-operators --framework XLA`` on a Neuron host can confirm.

The integer behaviour is made explicit on the command line rather than left to defaults that
Neuron has announced will change: 64-bit integers run natively (``--native-int64=enabled``, trn2
and later) or in 32 bits (trn1 always; ``NKIPY_NEURON_INT64=32`` elsewhere), and no operation may
be downcast silently (``--implicit-integer-downcast=none``), which the check guarantees is never
needed.
"""

from __future__ import annotations

import attrs

from nkipy_core import declare_env, env
from nkipy_core.errors import ConfigurationError

DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/"
#: the pages the rules come from
RELEASE_NOTES = DOCS + "release-notes/components/compiler.html"
DATA_TYPES = DOCS + "about-neuron/arch/neuron-features/data-types.html"
CLI = DOCS + "compiler/neuronx-cc/api-reference-guide/index.html"
JAX_KNOWN_ISSUES = DOCS + "frameworks/jax/setup/jax-neuronx-known-issues.html"


def error_page(code: str) -> str:
    return f"{DOCS}compiler/error-codes/{code}.html"


@attrs.frozen
class Rule:
    """One documented restriction: its name, what it requires, and where Neuron says so."""

    name: str
    requires: str
    source: str


RULES = {
    rule.name: rule
    for rule in (
        Rule(
            "opcode",
            "only operators neuronx-cc supports (the release notes' operator table, or named as "
            "accepted by another Neuron page)",
            f"{RELEASE_NOTES} (Supported Operators); {error_page('EVRF001')}",
        ),
        Rule(
            "element-type",
            "no f64 (no NeuronCore computes in it), no complex types, no FNUZ fp8 types; f8e4m3fn "
            "only on trn3",
            f"{DATA_TYPES}; {error_page('EVRF004')}; {error_page('EVRF005')}; "
            f"{error_page('EVRF051')}",
        ),
        Rule(
            "static-shape",
            "fully static shapes (no bounded or unbounded dynamic dimensions)",
            error_page("EMOD025"),
        ),
        Rule(
            "reduce",
            "reduce and reduce-window combine with exactly one of add, multiply, maximum, minimum, "
            "over one operand (no variadic reductions), from a constant init value",
            f"{RELEASE_NOTES} (Supported Operators: Reduce); {JAX_KNOWN_ISSUES}",
        ),
        Rule(
            "sort-comparator",
            "a sort comparator is one compare with direction LT, LE, GT or GE",
            JAX_KNOWN_ISSUES,
        ),
        Rule(
            "custom-call",
            "custom calls only to the targets neuronx-cc recognises",
            error_page("EVRF015"),
        ),
        Rule(
            "u64-constant",
            "no u64 constant above 2**32 - 1",
            error_page("ESFH002"),
        ),
        Rule(
            "int64-constant",
            "where 64-bit integers run in 32 bits, no s64 constant outside the int32 range (it "
            "would be cut)",
            DATA_TYPES,
        ),
        Rule(
            "u64-value",
            "where 64-bit integers run in 32 bits, no u64 values: the high word of every one "
            "would be lost",
            DATA_TYPES,
        ),
        Rule(
            "integer-dot",
            "no dot on integer operands (no integer matrix datapath)",
            error_page("EVRF035"),
        ),
        Rule(
            "integer-scatter",
            "no scatter that combines (add, multiply, maximum, minimum) on integer or boolean data",
            f"{error_page('EVRF016')}; {error_page('EVRF060')}",
        ),
        Rule(
            "integer-collective",
            "no all-reduce or reduce-scatter on integers (they reduce in f32)",
            f"{error_page('EVRF061')}; {error_page('EVRF063')}",
        ),
        Rule("s64-power", "no power on s64 operands", error_page("EVRF062")),
        Rule(
            "shift-right-arithmetic",
            "shift-right-arithmetic only on 32-bit operands",
            error_page("EVRF022"),
        ),
        Rule("integer-topk", "no topk on integer inputs", error_page("EVRF013")),
        Rule(
            "control-flow",
            "no conditional and no while loop whose trip count the compiler must prove",
            JAX_KNOWN_ISSUES,
        ),
        Rule(
            "dynamic-update-slice",
            "dynamic-update-slice only at constant start indices",
            f"{RELEASE_NOTES} (Supported Operators: DynamicUpdateSlice)",
        ),
        Rule(
            "gather",
            "gather with a start_index_map of distinct dimensions",
            f"{RELEASE_NOTES} (Supported Operators: Gather)",
        ),
        Rule(
            "rng-algorithm",
            "rng-bit-generator with the default algorithm only",
            error_page("EVRF006"),
        ),
    )
}

#: HLO opcodes of the release notes' "Supported Operators" table
TABLE_OPCODES = frozenset(
    """abs add all-gather all-reduce atan2 batch-norm-training batch-norm-grad
    batch-norm-inference bitcast-convert broadcast ceil clamp compare concatenate constant convert
    cosine custom-call divide dot dynamic-update-slice exponential floor gather get-tuple-element
    iota log and not maximum minimum multiply negate pad power reduce reshape reverse
    rng-bit-generator rng rsqrt scatter select select-and-scatter shift-right-logical sign sine
    slice sqrt subtract tanh transpose tuple""".split()
)
#: opcodes other Neuron pages name as accepted (error pages that restrict them, the complex64
#: operator list, the JAX known issues) although the table, which predates them, does not
DOCUMENTED_OPCODES = frozenset(
    """convolution reduce-window sort topk shift-right-arithmetic reduce-scatter all-to-all
    collective-permute collective-broadcast partition-id replica-id or log-plus-one
    exponential-minus-one tan logistic dynamic-slice parameter""".split()
)
#: opcodes nkipy emits that no Neuron page mentions: plain elementwise HLO that the compiler's
#: operator list is expected to hold, accepted here and listed in docs/runtimes.md as what only
#: ``neuronx-cc list-operators --framework XLA`` on a Neuron host can confirm
UNCONFIRMED_OPCODES = frozenset(
    "remainder xor round-nearest-even shift-left erf is-finite cbrt".split()
)
#: custom-call targets neuronx-cc recognises (EHCA005 / EVRF015)
CUSTOM_CALL_TARGETS = frozenset(
    """AwsNeuronErf AwsNeuronGelu AwsNeuronGeluApprxTanh AwsNeuronGeluBackward AwsNeuronSilu
    AwsNeuronSiluBackward AwsNeuronRmsNorm AwsNeuronSoftmax AwsNeuronSoftmaxBackward
    AwsNeuronCollectiveMatmul AwsNeuronIntMatmult AwsNeuronArgMax AwsNeuronArgMin AwsNeuronTopK
    AwsNeuronDropoutMaskV1 AwsNeuronCustomNativeKernel AwsNeuronCustomOp AwsNeuronDevicePrint
    ResizeNearest ResizeBilinear ResizeNearestGrad AwsNeuronLNCShardingConstraint
    AwsNeuronTransferWithStaticRing AwsNeuronModuleMarkerStart-Forward
    AwsNeuronModuleMarkerStart-Backward AwsNeuronModuleMarkerEnd-Forward
    AwsNeuronModuleMarkerEnd-Backward NeuronBoundaryMarker-Start NeuronBoundaryMarker-End
    QuantizeMX""".split()
)
#: HLO element types no NeuronCore has
REFUSED_TYPES = frozenset(
    {"f64", "c64", "c128", "f8e4m3fnuz", "f8e4m3b11fnuz", "f8e5m2fnuz", "f4e2m1fn"}
)

INT64_ENV = "NKIPY_NEURON_INT64"
declare_env(
    INT64_ENV,
    kind="text",
    meaning=(
        "How kernels compiled for trn2/trn3 run 64-bit integers: `native` (the default there; "
        "`--native-int64=enabled`) or `32` (cut to 32 bits, faster, as trn1 always does)."
    ),
    owner="nkipy-runtime",
)


F64_ENV = "NKIPY_NEURON_F64"
declare_env(
    F64_ENV,
    kind="text",
    meaning=(
        "`f32`: kernels compiled for Neuron compute f64 in f32, their f64 inputs and outputs "
        "converted on the host (warned once). Unset: ops on f64 run as torch on CPU."
    ),
    owner="nkipy-runtime",
)


@attrs.frozen
class NeuronProfile:
    """The rules one ``neuronx-cc`` target holds kernels to, and the flags that fix its integer
    behaviour."""

    target: str
    #: 64-bit integers run natively (trn2 and later, with --native-int64=enabled)
    native_int64: bool
    #: the user opted into f64 computed in f32 (``NKIPY_NEURON_F64=f32``)
    f64_as_f32: bool = False

    @property
    def name(self) -> str:
        f64 = ", f64 as f32" if self.f64_as_f32 else ""
        return f"{self.target} ({'native' if self.native_int64 else '32-bit'} int64{f64})"

    def refused_types(self) -> frozenset[str]:
        return REFUSED_TYPES if self.target == "trn3" else REFUSED_TYPES | {"f8e4m3fn"}

    def compiler_flags(self) -> tuple[str, ...]:
        """Flags passed on every compile: integer behaviour stated, never a default."""
        flags = ["--implicit-integer-downcast=none"]
        if self.target != "trn1":  # trn1 has only 32-bit integers; the flag is trn2 and later
            flags.insert(0, f"--native-int64={'enabled' if self.native_int64 else 'disabled'}")
        return tuple(flags)


def profile_for(target: str) -> NeuronProfile:
    """The profile of ``target`` (a resolved ``neuronx-cc`` target) with the configured int64
    mode; asking trn1 for native 64-bit integers is a ``ConfigurationError``."""
    mode = env(INT64_ENV) or ("32" if target == "trn1" else "native")
    if mode not in ("native", "32"):
        raise ConfigurationError(f"{INT64_ENV}={mode!r}: use 'native' or '32'")
    if target == "trn1" and mode == "native":
        raise ConfigurationError(
            f"{INT64_ENV}=native: trn1 has no 64-bit integers (they always run in 32 bits); unset "
            f"{INT64_ENV} or compile for trn2/trn3"
        )
    f64 = env(F64_ENV) or ""
    if f64 not in ("", "f32"):
        raise ConfigurationError(
            f"{F64_ENV}={f64!r}: use 'f32' (compute f64 in f32) or leave it unset (f64 ops on CPU)"
        )
    return NeuronProfile(target, native_int64=mode == "native", f64_as_f32=f64 == "f32")
