# Type stub for the kvevict package (the pure-Python half and the compiled
# kvevict._kvevict). Kept in step with the registry by tests/test_stub.py:
# every public name, every Policy method, each named class's parameters,
# defaults and query methods, and the Model and Decoder members.

import os
from typing import Dict, Iterator, List, Literal, NotRequired, Optional, Sequence, Tuple, TypedDict, Union

import numpy as np
import numpy.typing as npt

__version__: str
__all__: List[str]

_Path = Union[str, os.PathLike[str]]
_Trace = Union[str, os.PathLike[str]]

# The result shapes below are for type checking only (plain dicts at run time).

class ParamDescription(TypedDict):
    name: str  # camelCase, as in the JSON results
    default: int
    help: str

class PolicyDescription(TypedDict):
    name: str
    title: str
    summary: str
    params: List[ParamDescription]
    queries: List[str]
    signals: List[str]  # what its steps read: "attention", "key", "value", "queries" (docs/signals.md)

class Metrics(TypedDict):
    retainedAttentionMass: float
    heavyHitterRecall: float
    evictionCalls: int

class RunResult(TypedDict):
    policy: str
    trace: str
    budget: int
    params: Dict[str, int]
    steps: int
    metrics: Metrics
    evicted: int
    memoryBytes: int
    seconds: float

class CompareResult(TypedDict):
    trace: str
    rows: List[RunResult]

class SchemaField(TypedDict, total=False):
    name: str
    type: str  # "string", "integer", "number", "object" or "array"
    unit: str
    description: str
    presentWhen: str
    fields: List[SchemaField]

class RowSchema(TypedDict):
    run: List[SchemaField]
    compare: List[SchemaField]
    perplexity: List[SchemaField]
    serve: List[SchemaField]

class VectorReport(TypedDict):
    passed: int
    failed: int
    failures: List[str]

class ModelConfig(TypedDict):
    vocab: int
    layers: int
    heads: int  # query heads per layer
    kv_heads: int  # KV heads per layer: layers * kv_heads caches (policy instances)
    width: int
    ff: int
    context: int  # positions the model was trained on
    rope_base: float
    norm_eps: float

class PerplexityRow(TypedDict):
    policy: Optional[str]  # None for the full cache
    budget: Optional[int]  # None for the full cache
    params: Dict[str, int]  # camelCase keys
    prefill: NotRequired[int]  # with prefill > 0
    perplexity: float
    bitsPerByte: float
    # bitsPerByte minus the full cache's, and its 95 % interval paired by window
    # (None for the full cache; the interval None from a single window)
    extraBitsPerByte: Optional[float]
    extraLow: Optional[float]
    extraHigh: Optional[float]
    predictions: int  # tokens predicted (bytes for kvevict-tiny)
    predictedBytes: int  # the bytes of text they stand for
    tokenizer: str  # the model's tokenizer (docs/models.md)
    evicted: int
    granularity: NotRequired[str]  # "layer" or "sequence": which caches shared a budget (paged)
    blockSize: NotRequired[int]  # in block mode: the store, measured
    peakBlocks: NotRequired[int]
    peakPositions: NotRequired[int]  # with paged options
    # the store's precision (docs/paged.md "Fewer bits a position"), its
    # residual window, the bytes a stored position costs, and the most bytes
    # any one cache held at once (measured)
    kvPrecision: str
    kvResidual: int
    bytesPerPosition: float
    modelBytesPerPosition: float  # bytesPerPosition x layers x KV heads
    peakCacheBytes: int
    seconds: float

class ModelCompareRow(TypedDict):
    rank: Optional[int]  # None for the full cache
    policy: Optional[str]
    budget: Optional[int]
    params: Dict[str, int]
    prefill: NotRequired[int]  # with prefill > 0
    perplexity: float
    bitsPerByte: float
    # bitsPerByte minus the full cache's, and its 95 % interval paired by window
    # (None for the full cache; the interval None from a single window)
    extraBitsPerByte: Optional[float]
    extraLow: Optional[float]
    extraHigh: Optional[float]
    predictions: int  # tokens predicted (bytes for kvevict-tiny)
    predictedBytes: int  # the bytes of text they stand for
    tokenizer: str  # the model's tokenizer (docs/models.md)
    evicted: int
    # the proxies (None for the full cache); absent with a prefill
    retainedAttentionMass: NotRequired[Optional[float]]
    heavyHitterRecall: NotRequired[Optional[float]]
    evictionCalls: NotRequired[Optional[int]]
    granularity: NotRequired[str]  # "layer" or "sequence": which caches shared a budget (paged)
    blockSize: NotRequired[int]  # in block mode: the store, measured
    peakBlocks: NotRequired[int]
    peakPositions: NotRequired[int]  # with paged options
    # the store's precision (docs/paged.md "Fewer bits a position"), its
    # residual window, the bytes a stored position costs, and the most bytes
    # any one cache held at once (measured)
    kvPrecision: str
    kvResidual: int
    bytesPerPosition: float
    modelBytesPerPosition: float  # bytesPerPosition x layers x KV heads
    peakCacheBytes: int
    seconds: float

class PersistenceRow(TypedDict):
    lag: int
    important: int
    persisted: int
    share: float
    baseRate: float

# The bytes of a text (a file: open(path, "rb").read()), or a path to read.
_Text = Union[bytes, bytearray, memoryview, os.PathLike[str]]
# A run: a policy (a name or a Policy, whose parameters are used), with a
# budget (None: the policy's own) and extra parameters.
_Run = Union[
    str,
    Policy,
    Tuple[Union[str, Policy], Optional[int]],
    Tuple[Union[str, Policy], Optional[int], Dict[str, int]],
]

class Policy:
    """A KV-cache eviction policy built by registry name."""

    def __init__(self, name: str, **params: int) -> None: ...
    def on_decode_step(self, pos: int, attn: Optional[npt.ArrayLike] = None) -> None: ...
    def on_step(
        self,
        pos: int,
        attention: Optional[npt.ArrayLike] = None,
        key: Optional[npt.ArrayLike] = None,
        value: Optional[npt.ArrayLike] = None,
        queries: Optional[npt.ArrayLike] = None,
    ) -> None: ...
    def on_origin(
        self,
        key: Optional[npt.ArrayLike] = None,
        value: Optional[npt.ArrayLike] = None,
        queries: Optional[npt.ArrayLike] = None,
    ) -> None: ...
    def evict(self, budget: int) -> List[int]: ...
    def kept_count(self) -> int: ...
    def __len__(self) -> int: ...
    def memory_bytes(self) -> int: ...
    def query(self, name: str, *args: int) -> Union[int, float]: ...
    @property
    def name(self) -> str: ...
    @property
    def params(self) -> Dict[str, int]: ...
    @property
    def queries(self) -> List[str]: ...
    @property
    def signals(self) -> Tuple[str, ...]: ...
    @property
    def last_attention_copied(self) -> bool: ...
    @property
    def last_attention_address(self) -> int: ...
    # At run time a policy's query methods (votes_of, ...) also resolve on a
    # plain Policy; the stub leaves that out so typos stay type errors -- use
    # query() or the named classes when type-checking.

class Scissorhands(Policy):
    def __init__(
        self,
        budget: int = 512,
        *,
        recent_window: int = 32,
        history_window: int = 0,
        drop_amount: int = 1,
        sinks: int = 0,
        normalize: int = 0,
    ) -> None: ...
    def votes_of(self, pos: int) -> int: ...
    def rank_of(self, pos: int) -> float: ...

class H2O(Policy):
    def __init__(self, budget: int = 512, *, recent_window: int = 32, sinks: int = 0, normalize: int = 0) -> None: ...
    def score_of(self, pos: int) -> float: ...

class StreamingLLM(Policy):
    def __init__(self, budget: int = 512, *, sinks: int = 4) -> None: ...
    def sink_count(self) -> int: ...

class SlidingWindow(Policy):
    def __init__(self, budget: int = 512) -> None: ...

class TOVA(Policy):
    def __init__(self, budget: int = 512) -> None: ...
    def last_attention_of(self, pos: int) -> float: ...

class SnapKV(Policy):
    def __init__(
        self,
        budget: int = 512,
        *,
        recent_window: int = 32,
        obs_window: int = 16,
        pool_kernel: int = 7,
    ) -> None: ...
    def window_score_of(self, pos: int) -> float: ...

class PyramidKV(Policy):
    def __init__(
        self,
        budget: int = 512,
        *,
        layer: int = 0,
        num_layers: int = 1,
        pyramid_ratio: int = 4,
        recent_window: int = 32,
        obs_window: int = 16,
        pool_kernel: int = 7,
    ) -> None: ...
    def effective_budget(self) -> int: ...
    def window_score_of(self, pos: int) -> float: ...

class BlockEvictor:
    """Whole-block eviction over any policy, for a paged KV cache (docs/paged.md)."""
    def __init__(
        self,
        policy: str,
        block_budget: int,
        block_size: int = 16,
        start_blocks: int = 0,
        recent_blocks: int = 0,
        block_score: str = "sum",
        **kwargs: int,
    ) -> None: ...
    def on_decode_step(self, pos: int, attention: Optional[npt.ArrayLike]) -> None: ...
    def on_step(
        self,
        pos: int,
        attention: Optional[npt.ArrayLike] = None,
        key: Optional[npt.ArrayLike] = None,
        value: Optional[npt.ArrayLike] = None,
        queries: Optional[npt.ArrayLike] = None,
    ) -> None: ...
    def on_origin(
        self,
        key: Optional[npt.ArrayLike] = None,
        value: Optional[npt.ArrayLike] = None,
        queries: Optional[npt.ArrayLike] = None,
    ) -> None: ...
    def evict_blocks(self, block_budget: int) -> List[int]: ...
    def evicted_positions(self) -> List[int]: ...
    def removed_before(self) -> List[int]: ...
    def positions(self) -> List[int]: ...
    def block_score_of(self, block: int) -> Union[float, str]: ...
    @property
    def kept_count(self) -> int: ...
    @property
    def block_count(self) -> int: ...
    def query(self, name: str, *args: int) -> float: ...

class LayerBudget:
    """One budget per layer shared by its KV heads, AdaKV-style (docs/paged.md)."""
    def __init__(self, policy: str, heads: int, layer_budget: int, head_floor: int = -1, **kwargs: int) -> None: ...
    def on_decode_step(self, head: int, pos: int, attention: Optional[npt.ArrayLike]) -> None: ...
    def on_step(
        self,
        head: int,
        pos: int,
        attention: Optional[npt.ArrayLike] = None,
        key: Optional[npt.ArrayLike] = None,
        value: Optional[npt.ArrayLike] = None,
        queries: Optional[npt.ArrayLike] = None,
    ) -> None: ...
    def on_origin(
        self,
        head: int,
        key: Optional[npt.ArrayLike] = None,
        value: Optional[npt.ArrayLike] = None,
        queries: Optional[npt.ArrayLike] = None,
    ) -> None: ...
    def evict(self, layer_budget: int) -> int: ...
    def victims(self, head: int) -> List[int]: ...
    def kept_count(self, head: int) -> int: ...
    def query(self, head: int, name: str, *args: int) -> float: ...
    @property
    def heads(self) -> int: ...
    @property
    def head_floor(self) -> int: ...
    @property
    def head_budget(self) -> int: ...

class TraceIterator(Iterator[npt.NDArray[np.float32]]):
    def __iter__(self) -> TraceIterator: ...
    def __next__(self) -> npt.NDArray[np.float32]: ...
    def __length_hint__(self) -> int: ...
    @property
    def id(self) -> str: ...
    @property
    def steps(self) -> int: ...
    @property
    def step(self) -> int: ...

def policy(name: str, /, **params: int) -> Policy: ...
class SimdInfo(TypedDict):
    compiled: List[str]
    supported: List[str]
    active: str

def policies() -> List[PolicyDescription]: ...
def simd() -> SimdInfo: ...
def select_simd(target: str) -> None: ...
def pyramid_budget(budget: int, layer: int, num_layers: int, ratio: int) -> int: ...
def trace(id: _Trace = "decode-4096", steps: Optional[int] = None) -> TraceIterator: ...
def trace_hash(id: _Trace = "decode-4096", steps: Optional[int] = None) -> int: ...
def trace_ids() -> List[str]: ...
# Which caches share a budget (docs/paged.md, "Granularity").
_Granularity = Literal["head", "layer", "sequence"]

class PagedOptions(TypedDict, total=False):
    block_size: int
    start_blocks: int
    recent_blocks: int
    block_score: Literal["sum", "mean", "max", "normsum"]
    granularity: _Granularity  # "layer" is what layer_budget True says; given both, they must agree
    layer_budget: bool
    head_floor: int

def run(
    policy: Union[str, Policy],
    budget: Optional[int] = None,
    trace: _Trace = "decode-4096",
    steps: Optional[int] = None,
    paged: Optional[PagedOptions] = None,
    keys: Optional[_Path] = None,
    values: Optional[_Path] = None,
    queries: Optional[_Path] = None,
    **params: int,
) -> RunResult: ...
def compare(
    policies: Union[str, Sequence[str]] = "all",
    budgets: Sequence[int] = [256, 512, 1024],
    overrides: Optional[Dict[str, Union[int, Dict[str, int]]]] = None,
    trace: _Trace = "decode-4096",
    steps: Optional[int] = None,
    paged: Optional[PagedOptions] = None,
    keys: Optional[_Path] = None,
    values: Optional[_Path] = None,
    queries: Optional[_Path] = None,
) -> CompareResult: ...
def row_schema() -> RowSchema: ...
def run_vectors(paths: Union[_Path, Sequence[_Path]]) -> VectorReport: ...

class Model:
    """A model file kvevict reads (.kvm, .gguf, safetensors), loaded and checked."""

    def __init__(self, path: _Path, context: int = 0, matmul: Literal["exact", "int8"] = "exact") -> None: ...
    @property
    def config(self) -> ModelConfig: ...
    @property
    def matmul(self) -> Literal["exact", "int8"]: ...
    @property
    def parameter_count(self) -> int: ...
    @property
    def path(self) -> str: ...

# Where kept keys sit in rotary space (docs/streaming.md): at their tokens'
# positions, or at their index among the positions their cache holds.
_PositionMode = Literal["original", "cache"]

class Decoder:
    """One sequence through a Model with a real KV cache per (layer, head)."""

    def __init__(self, model: Model, capacity: int = 0, positions: _PositionMode = "original") -> None: ...
    def step(self, token: int) -> npt.NDArray[np.float32]: ...
    def set_policy(self, head: int, policy: Optional[Policy], budget: Optional[int] = None) -> None: ...
    def policy(self, head: int) -> Optional[Policy]: ...
    def reset(self) -> None: ...
    def held(self, head: int) -> List[int]: ...
    def attended(self, head: int) -> List[int]: ...
    def attention(self, head: int) -> npt.NDArray[np.float32]: ...
    @property
    def position(self) -> int: ...
    @property
    def evicted(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def head_count(self) -> int: ...

class PoolStats(TypedDict):
    blocks: int
    free_blocks: int
    in_use: int
    peak_in_use: int
    references: int
    peak_saved: int
    shared: int
    copies: int

class Batch:
    """Sequences decoding together over one pool of KV blocks (docs/serving.md)."""

    def __init__(
        self,
        model: Model,
        pool_blocks: int,
        capacity: int = 0,
        block_size: int = 16,
        share_prefix: bool = True,
        positions: _PositionMode = "original",
    ) -> None: ...
    def join(
        self,
        policy: Optional[Union[str, Policy]] = None,
        budget: Optional[int] = None,
        params: Optional[Dict[str, int]] = None,
        mode: str = "token",
    ) -> int: ...
    def step(self, id: int, token: int) -> npt.NDArray[np.float32]: ...
    def step_all(self, ids: Sequence[int], tokens: Sequence[int]) -> npt.NDArray[np.float32]: ...
    def leave(self, id: int) -> None: ...
    @property
    def sequences(self) -> List[int]: ...
    def held(self, id: int, cache: int) -> List[int]: ...
    def pool_stats(self) -> PoolStats: ...
    def __len__(self) -> int: ...

class ServeRow(TypedDict):
    policy: Optional[str]  # None for the full cache
    budget: Optional[int]  # None for the full cache
    mode: str  # "full", "token", "block" or "chunked"
    granularity: NotRequired[str]  # a policy's rows at granularity "layer" or "sequence"
    prefixSharing: str  # "on" or "off"
    sequences: int
    sharedPrefix: int
    tokens: int
    chunk: NotRequired[int]  # chunked runs
    prompt: NotRequired[int]  # chunked runs
    blockSize: int
    poolBlocks: int
    peakBlocks: int
    blocksSavedBySharing: int
    sharedBlocks: int
    copiedBlocks: int
    peakPositions: int
    peakCachePositions: int
    positionsHeld: int
    evicted: int
    leakedBlocks: int
    tokensPerSecond: float
    seconds: float

def serve_bench(
    model: Model,
    text: _Text,
    sequences: Sequence[int] = [4],
    policies: Union[str, Sequence[str]] = "none",
    budget: int = 128,
    modes: Union[str, Sequence[str]] = "token",
    sharing: Union[bool, Sequence[bool]] = True,
    chunks: Sequence[int] = [0],
    shared_prefix: int = 512,
    tokens: int = 0,
    prompt: int = 0,
    window: int = 32,
    block_size: int = 16,
    pool_blocks: int = 0,
    overrides: Optional[Dict[str, Union[int, Dict[str, int]]]] = None,
    positions: _PositionMode = "original",
    granularity: _Granularity = "head",
) -> List[ServeRow]: ...
def perplexity(
    model: Model,
    text: _Text,
    runs: Optional[Sequence[_Run]] = None,
    max_windows: int = 0,
    paged: Optional[PagedOptions] = None,
    prefill: int = 0,
    prefill_window: int = 32,
    kv_precision: str = "fp32",
    kv_residual: Optional[int] = None,
) -> List[PerplexityRow]: ...
def compare_model(
    model: Model,
    text: _Text,
    policies: Union[str, Sequence[str]] = "all",
    budgets: Sequence[int] = (64, 128, 256, 512),
    overrides: Optional[Dict[str, Union[int, Dict[str, int]]]] = None,
    max_windows: int = 0,
    paged: Optional[PagedOptions] = None,
    prefill: int = 0,
    prefill_window: int = 32,
    kv_precision: str = "fp32",
    kv_residual: Optional[int] = None,
) -> List[ModelCompareRow]: ...
def sweep_model(
    model: Model,
    text: _Text,
    policy: str,
    param: str,
    values: Sequence[int],
    budgets: Sequence[int] = (64, 128, 256),
    params: Optional[Dict[str, int]] = None,
    max_windows: int = 0,
    kv_precision: str = "fp32",
    kv_residual: Optional[int] = None,
    skip_refused: bool = False,
) -> SweepRows: ...

class SweepRows(List[PerplexityRow]):
    """sweep_model()'s rows, with the value x budget pairs skip_refused left out."""

    skipped: List[str]  # one line each: "recentWindow=96 at budget 64: <the rule>"

class TaskRow(TypedDict):
    task: str
    policy: str  # "full" for the full cache
    budget: int  # 0 for the full cache
    moment: str  # "full", "decode", "prefill" or "prefill-query"
    length: int
    depth: float
    samples: int
    correct: int
    accuracy: float
    accuracy_low: float  # Wilson 95 % interval
    accuracy_high: float
    evicted: int
    kvPrecision: str
    kvResidual: int
    bytesPerPosition: float
    granularity: NotRequired[str]  # a policy's rows at granularity "layer" or "sequence"

def tasks(
    model: Model,
    text: _Text,
    tasks: Union[str, Sequence[str]] = "passkey",
    lengths: Sequence[int] = (1024,),
    depths: int = 5,
    samples: int = 20,
    policies: Optional[Union[str, Sequence[str]]] = "all",
    budgets: Sequence[int] = (128,),
    moments: Union[str, Sequence[str]] = "decode",
    overrides: Optional[Dict[str, Union[int, Dict[str, int]]]] = None,
    seed: int = 1,
    window: int = 32,
    chunk: int = 0,
    kv_precision: str = "fp32",
    kv_residual: Optional[int] = None,
    granularity: _Granularity = "head",
) -> List[TaskRow]: ...

class TokensPerSecondSpread(TypedDict):
    min: float
    median: float
    max: float

class DecodeShares(TypedDict):
    projections: float
    activation: float
    attention: float
    policies: float
    other: float

class DecodeBenchRow(TypedDict):
    mode: str  # "decode", "prefill" or "together"
    policy: str  # "full cache" first; "all runs" for together
    budget: int  # 0 for the full cache
    threads: int
    runs: int  # decoders a pass steps
    prompt: int  # tokens prefilled before the timed ones
    tokens: int
    tokensPerSecond: float  # wall time; a together row counts every run's tokens
    tokensPerSecondSpread: TokensPerSecondSpread
    weightBytesPerToken: int
    readBandwidthGBps: float
    floorTokensPerSecond: float  # the read bandwidth over the weights' bytes a token
    ofFloor: float
    speedup: float  # prefill: over the full cache's decode; together: over the runs one at a time; 0 for decode
    shares: DecodeShares

def bench_model(
    model: Model,
    text: Optional[_Text] = None,
    tokens: int = 1024,
    rounds: int = 5,
    policies: Union[str, Sequence[str]] = ("h2o", "scissorhands", "snapkv", "sliding-window"),
    budgets: Sequence[int] = (128,),
    prompt: int = 0,
    threads: Sequence[int] = (0,),
    together: bool = False,
    prefill_chunk: int = 256,
    prompt_logits: Literal["all", "last"] = "all",
) -> List[DecodeBenchRow]: ...
class StreamSegment(TypedDict):
    begin: int  # stream positions [begin, end) whose tokens were predicted
    end: int
    predictions: int
    bytes: int
    bitsPerByte: float
    perplexity: float

class StreamRow(TypedDict):
    policy: Optional[str]  # None for the full cache, "recompute" for the recomputed window
    label: str  # "full cache", "recompute", "streaming-llm sinks=4", ...
    budget: int  # 0 for the full cache
    params: Dict[str, int]
    positions: _PositionMode
    tokens: int
    predictions: int
    bytes: int
    bitsPerByte: float
    pastTrainedContext: bool
    peakPositions: int
    evicted: int
    kvPrecision: str
    granularity: NotRequired[str]  # "sequence": a policy's rows at that granularity
    tokenizer: str
    seconds: float
    segments: List[StreamSegment]

class StreamResult(TypedDict):
    rows: List[StreamRow]

class SinkShare(TypedDict):
    layer: int
    first: float
    firstFour: float
    evenFirst: float
    evenFirstFour: float

def stream(
    model: Model,
    text: _Text,
    policies: Optional[Union[str, Sequence[str]]] = "default",
    budgets: Sequence[int] = (256, 512),
    positions: Union[str, Sequence[_PositionMode]] = ("original", "cache"),
    tokens: int = 0,
    segment: int = 0,
    full_cache: bool = True,
    recompute: int = 0,
    recompute_tokens: int = 0,
    kv_precision: str = "fp32",
    overrides: Optional[Dict[str, Union[int, Dict[str, int]]]] = None,
    kv_residual: Optional[int] = None,
    granularity: Literal["head", "sequence"] = "head",
) -> StreamResult: ...
def sink_shares(model: Model, text: _Text, tokens: int = 0) -> List[SinkShare]: ...

class ChoosePlan(TypedDict):
    windows: int  # perplexity windows run
    windowsAvailable: int  # in the text
    context: int  # positions a window
    passkeyLength: int  # positions a passkey sample
    depths: int
    samples: int  # passkey samples a depth
    decodeTokens: int  # timed a run, at a cache of `budget`
    probeSeconds: float  # the two probes (none when windows and samples are fixed)
    windowSeconds: float  # one window through every run (0 when not probed)
    sampleSeconds: float  # one passkey sample through every run (0 when not probed)
    plannedSeconds: float  # the estimate, probes included

class ChooseRow(TypedDict):
    rank: int  # 1: the fewest extra bits per byte
    policy: str
    budget: int
    extraBitsPerByte: float
    extraLow: Optional[float]  # the 95 % interval paired by window; None without one
    extraHigh: Optional[float]
    passkeyCorrect: int  # both depths together
    passkeySamples: int
    passkeyAccuracy: float
    tokensPerSecond: float  # decode at a cache of `budget` (0 at sequence granularity: not timed)
    kvBytes: int  # one sequence at the budget: every cache, keys and values

class ChooseFullCache(TypedDict):
    passkeyAccuracy: float
    tokensPerSecond: float
    kvBytes: int  # a window's worth, at the context

class ChooseResult(TypedDict):
    command: Literal["choose"]
    plan: ChoosePlan
    rows: List[ChooseRow]  # ranked
    fullCache: ChooseFullCache
    recommendation: str  # one line: rank 1, and why
    narrow: List[str]  # the commands that would narrow the intervals
    seconds: float

def choose(
    model: Model,
    text: _Text,
    budget: int = 256,
    policies: Optional[Union[str, Sequence[str]]] = None,
    minutes: float = 15.0,
    windows: Optional[int] = None,
    samples: Optional[int] = None,
    granularity: Literal["head", "sequence"] = "head",
) -> ChooseResult: ...
def attention_from_keys(
    queries: npt.ArrayLike, keys: npt.ArrayLike, scale: Optional[float] = None
) -> npt.NDArray[np.float32]: ...
def rope_neox(x: npt.ArrayLike, pos: int, base: float = 10000.0) -> npt.NDArray[np.float32]: ...
def record_attention(model: Model, text: _Text, tokens: int = 0) -> npt.NDArray[np.float32]: ...
def persistence(attention: npt.ArrayLike, lags: Sequence[int]) -> List[PersistenceRow]: ...
def prefill(policy: str, window: npt.ArrayLike, budget: int, **params: int) -> List[int]: ...
