"""Layer profiles for the synthetic Horovod worker: gradient bytes and compute time per layer.

ResNet-50's sizes are derived from the architecture (He et al. 2016, torchvision's layout:
bottleneck blocks [3, 4, 6, 3], expansion 4), not copied from a table; a test checks the total
against torchvision's well-known 25,557,032 parameters. A "layer" is one convolution together
with its batch norm, or the final fully connected layer: what a backward pass produces as one
unit. Profiles in the seed-002 trace shape (id, name, forward, backward, comm, gradient bytes
per row) can be loaded instead.

Compute time per layer follows the thesis: forward:backward = 1:2; forward time falls with
the layer index and backward time rises with it, each an arithmetic progression.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BYTES_PER_PARAM = 4  # float32 gradients

FIRST_BUCKET_BYTES = 1024 * 1024  # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES


def buckets_for(params: list[int], cap_bytes: int) -> list[list[int]]:
    """DistributedDataParallel's bucketing of layers (given input to output, in float32
    parameters): reverse order, the first bucket capped at 1 MiB (or `cap_bytes` if smaller),
    the rest at `cap_bytes`; a layer larger than the cap gets a bucket of its own. Returns
    layer indices per bucket. The synthetic DDP worker reduces these buckets, and `testbed
    predict` models them."""
    out: list[list[int]] = []
    current: list[int] = []
    size = 0
    for j in range(len(params) - 1, -1, -1):
        cap = min(FIRST_BUCKET_BYTES, cap_bytes) if not out else cap_bytes
        nbytes = BYTES_PER_PARAM * int(params[j])
        if current and size + nbytes > cap:
            out.append(current)
            current, size = [], 0
        current.append(j)
        size += nbytes
    if current:
        out.append(current)
    return out


def static_buffers(nbytes: list[int | float], threshold: float) -> list[list[int]]:
    """The thesis' fixed fusion buffers (its ns-3 worker's InitializeRingAllReduceMap): layers
    walked from the last to the first, each joining the current buffer while the buffer stays
    ≤ `threshold` bytes; a layer larger than the threshold gets a buffer of its own. Returns
    the buffers in the order backward makes them ready (the last layer's first), each one's
    layer indices ascending; a buffer is ready when its lowest layer is. (The Python simulator
    of the thesis' ch. 4 mapped first to last instead; the ns-3 code produced ch. 5's figures.)"""
    out: list[list[int]] = []
    current: list[int] = []
    size = 0.0
    for j in range(len(nbytes) - 1, -1, -1):
        if current and size + nbytes[j] > threshold:
            out.append(sorted(current))
            current, size = [], 0.0
        current.append(j)
        size += nbytes[j]
    if current:
        out.append(sorted(current))
    return out


@dataclass(frozen=True)
class Layer:
    name: str
    params: int  # gradient elements (float32)
    forward_s: float = 0.0
    backward_s: float = 0.0

    @property
    def nbytes(self) -> int:
        return self.params * BYTES_PER_PARAM


def resnet50_layers() -> list[Layer]:
    """(name, parameter count) per conv+bn / fc layer of ResNet-50, input to output."""
    layers: list[Layer] = []

    def conv(name: str, cin: int, cout: int, k: int) -> None:
        # conv weight (no bias) + batch-norm weight and bias
        layers.append(Layer(name, cin * cout * k * k + 2 * cout))

    conv("conv1", 3, 64, 7)
    cin = 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True), 1):
        for b in range(blocks):
            pre = f"layer{stage}.{b}"
            conv(f"{pre}.conv1", cin, width, 1)
            conv(f"{pre}.conv2", width, width, 3)
            conv(f"{pre}.conv3", width, width * 4, 1)
            if b == 0:
                conv(f"{pre}.downsample", cin, width * 4, 1)
            cin = width * 4
    layers.append(Layer("fc", 2048 * 1000 + 1000))
    return layers


def thesis_ns3_layers(model_bytes: int = 100_000_000, n_layers: int = 50) -> list[Layer]:
    """The model of the thesis' ns-3 experiment (ch. 5) as its run script writes it
    (hgao10/ns3 runs/pfabric_flows_horovod/generate_traffic_and_run_pfabric_horovod.py,
    `calculate_layer_size`): a unit of int(2 · model / (9 · L)) bytes (444,444 B), layers
    i < L/2 one unit, L/2 ≤ i ≤ 0.75 L four, the rest twelve: 25 × 444,444 B, 13 ×
    1,777,776 B and 12 × 5,333,328 B, 98,222,124 B of the nominal 100 MB."""
    unit = int(2 * model_bytes / (9 * n_layers))
    out = []
    for i in range(n_layers):
        mult = 1 if i < n_layers / 2 else 4 if i <= 0.75 * n_layers else 12
        out.append(Layer(f"layer{i}", mult * unit // BYTES_PER_PARAM))
    return out


MODELS = {"resnet50": resnet50_layers, "thesis-ns3": thesis_ns3_layers}

# The real mode's CPU model (horovod_worker.small_cnn), its layers with parameters in forward
# order: (name, parameters, weights and bias together). Written out so that the controller can
# choose a policy's layers without importing torch; tests/unit/test_models.py checks them
# against the model torch builds.
SMALL_CNN_LAYERS: list[tuple[str, int]] = [
    ("conv1", 3 * 16 * 3 * 3 + 16),
    ("conv2", 16 * 32 * 3 * 3 + 32),
    ("fc", 32 * 8 * 8 * 10 + 10),
]


def resnet18_layers(width: int = 16, classes: int = 10) -> list[tuple[str, int]]:
    """ResNet-18 (He et al. 2016: four stages of two basic blocks) in its CIFAR form (a 3×3
    stem, no max-pool, 32×32 inputs) with `width` channels in its first stage (64 in the
    paper; 16 here: 0.70 M parameters, 2.8 MB of gradients, which 2 CPU cores train and ring
    over a 100 Mbit/s link in about a second), the layers with parameters in the order
    torch registers them (horovod_worker.resnet18): each convolution (no bias) and each
    batch norm (weight and bias), a stage's first block's 1×1 projection after its second
    norm, then the classifier."""
    out = [("stem.conv", 3 * width * 9), ("stem.bn", 2 * width)]
    c_in = width
    for stage in range(4):
        c = width * 2**stage
        for block in range(2):
            name = f"layer{stage + 1}.{block}"
            first_in = c_in if block == 0 else c
            out += [(f"{name}.conv1", first_in * c * 9), (f"{name}.bn1", 2 * c),
                    (f"{name}.conv2", c * c * 9), (f"{name}.bn2", 2 * c)]  # fmt: skip
            if block == 0 and first_in != c:
                out += [(f"{name}.proj", first_in * c), (f"{name}.proj_bn", 2 * c)]
        c_in = c
    return [*out, ("fc", c_in * classes + classes)]


@dataclass(frozen=True)
class RealModel:
    """A model that mode real trains on CPU: its input shape, classes and layers with
    parameters (name, parameters), written out so that the controller chooses a policy's
    layers without importing torch (tests/unit/test_models.py builds each with torch)."""

    shape: tuple[int, ...]
    classes: int
    layers: list[tuple[str, int]]


REAL_MODELS = {
    "small-cnn": RealModel((3, 32, 32), 10, SMALL_CNN_LAYERS),
    "resnet18-narrow": RealModel((3, 32, 32), 10, resnet18_layers(16)),
}


def scale_to(layers: list[Layer], model_bytes: int) -> list[Layer]:
    """Scale every layer's size by one factor so the model totals `model_bytes`; the
    distribution over layers (which decides fusion and overlap) is kept."""
    total = sum(layer.nbytes for layer in layers)
    f = model_bytes / total
    return [Layer(x.name, max(1, round(x.params * f)), x.forward_s, x.backward_s) for x in layers]


def with_compute(layers: list[Layer], compute_s: float) -> list[Layer]:
    """Spread `compute_s` per iteration over the layers: forward 1/3, backward 2/3; forward
    time falls linearly with the layer index, backward time rises linearly."""
    n = len(layers)
    tri = n * (n + 1) / 2
    fwd, bwd = compute_s / 3, 2 * compute_s / 3
    return [
        Layer(x.name, x.params, fwd * (n - i) / tri, bwd * (i + 1) / tri)
        for i, x in enumerate(layers)
    ]


def with_thesis_compute(layers: list[Layer], compute_s: float) -> list[Layer]:
    """The thesis' own spread of `compute_s` (its scripts' `calculate_FP_BP_compute_time`,
    chapters 4 and 5 alike): forward 1/3 and backward 2/3 as arithmetic progressions with a
    step of 2 · total / (L (L − 1)), forward falling from 2 · total / L to 0 and backward
    rising from 0; each zero replaced by one step, so an iteration computes compute_s plus
    those two steps, compute_s · (1 + 2/(L(L − 1))): 1/1225 more at L = 50."""
    n = len(layers)
    fwd, bwd = compute_s / 3, 2 * compute_s / 3
    d_f, d_b = 2 * fwd / (n * (n - 1)), 2 * bwd / (n * (n - 1))
    out = []
    for i, x in enumerate(layers):
        f, b = 2 * fwd / n - i * d_f, i * d_b
        out.append(Layer(x.name, x.params, f if i < n - 1 else d_f, b if i > 0 else d_b))
    return out


# a model whose source spreads its compute its own way
COMPUTE_SPREADS = {"thesis-ns3": with_thesis_compute}


TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def load_trace(path: Path, time_unit: str = "us") -> list[Layer]:
    """A seed-002 style trace: `Id Name Forward Backward Comm Size` rows (spaces, tabs or
    commas; a header line and # comments are skipped). Layers with a size of 0 have compute
    only; their time is folded into the next layer that has a gradient."""
    scale = TIME_UNITS[time_unit]
    layers: list[Layer] = []
    carry_f = carry_b = 0.0
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].replace(",", " ").strip()
        if not line:
            continue
        cols = line.split()
        if not cols[0].lstrip("-").isdigit():
            continue  # header
        if len(cols) < 6:
            raise ValueError(
                f"{path}:{lineno}: expected 6 columns (id name forward backward comm size)"
            )
        try:
            fwd, bwd, size = float(cols[2]) * scale, float(cols[3]) * scale, int(float(cols[5]))
        except ValueError:
            raise ValueError(
                f"{path}:{lineno}: forward, backward and size must be numbers"
            ) from None
        if size <= 0:
            carry_f += fwd
            carry_b += bwd
            continue
        layers.append(Layer(cols[1], max(1, size // BYTES_PER_PARAM), fwd + carry_f, bwd + carry_b))
        carry_f = carry_b = 0.0
    if not layers:
        raise ValueError(f"{path}: no layer with a gradient")
    if carry_f or carry_b:  # trailing compute-only layers (loss): count them on the last layer
        last = layers[-1]
        layers[-1] = Layer(
            last.name, last.params, last.forward_s + carry_f, last.backward_s + carry_b
        )
    return layers


def total_bytes(layers: list[Layer]) -> int:
    return sum(x.nbytes for x in layers)


def total_compute(layers: list[Layer]) -> float:
    return sum(x.forward_s + x.backward_s for x in layers)
