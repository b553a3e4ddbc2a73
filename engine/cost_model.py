"""What one engine step costs on a hardware target: a roofline with measured efficiencies.

    duration = max(FLOPs / (peak FLOP/s x flops_efficiency),
                   weight bytes / (bandwidth x bandwidth_efficiency) + KV bytes / (bandwidth x kv_bandwidth_efficiency))
               + overhead_s + overhead_per_seq_s x requests in the batch + overhead_per_token_s x tokens
               (+ tensor-parallel all-reduces)

At 100 % of the datasheet peaks with a fixed 0.5 ms overhead (the uncalibrated default) it
is the floor physics allows, not what a server achieves: measured against published vLLM figures
its TTFT and TPOT came out 30 - 69 % too short and its throughput 36 - 85 % too high. A calibration replaces the
efficiencies and the overhead terms with fitted ones and says where they come from (its label,
its source) and how far off a simulated time is expected to be (expected_error, relative).
The calibration travels inside HardwareSpec as a plain table, so a preset, a user preset and a
recording carry it like any other field.
"""

from __future__ import annotations

from kvscope.engine.checks import ConfigError, real_number

UNCALIBRATED_LABEL = "datasheet peaks, uncalibrated"
# The median error of the uncalibrated roofline against the nine published vLLM figures in
# tests/fixtures/published_vllm_timings.toml (TTFT, TPOT and throughput on H100 and A100): 51 %.
UNCALIBRATED_EXPECTED_ERROR = 0.51

# Every field of a calibration and its default: the uncalibrated roofline.
UNCALIBRATED = {
    "label": UNCALIBRATED_LABEL,
    "flops_efficiency": 1.0,  # achieved / peak dense FLOP/s
    "bandwidth_efficiency": 1.0,  # achieved / peak memory bandwidth, streaming the weights
    # ... reading and writing the paged KV cache (gathers of scattered blocks: slower on a CPU);
    # a table without it takes bandwidth_efficiency's
    "kv_bandwidth_efficiency": 1.0,
    "overhead_s": 0.0005,  # per step: launches, sampling, the scheduler's host work
    "overhead_per_seq_s": 0.0,  # per request in the batch: its metadata, its sampling
    "overhead_per_token_s": 0.0,  # per scheduled token: element-wise kernels the FLOP count leaves out
    "expected_error": UNCALIBRATED_EXPECTED_ERROR,  # typical |simulated - measured| / measured
    "source": "",
}
_RATES = ("flops_efficiency", "bandwidth_efficiency", "kv_bandwidth_efficiency")
_OVERHEADS = ("overhead_s", "overhead_per_seq_s", "overhead_per_token_s")
MAX_EFFICIENCY = 10.0  # above 1 only where the peak itself is an estimate (a CPU's)
MIN_EFFICIENCY = 1e-3  # fits here read 0.3 - 1.0; 1e-300 would put a step at 1e298 s
ALLREDUCE_LATENCY_S = 10e-6  # per collective, NVLink class


def check_calibration(table, owner: str) -> dict:
    """A complete calibration table from a partial one: the fields given, checked; the rest uncalibrated."""
    if table is None:
        return dict(UNCALIBRATED)
    if not isinstance(table, dict):
        raise ConfigError(f"{owner}: calibration must be a table of {', '.join(UNCALIBRATED)}, got {table!r:.60}")
    unknown = sorted(set(table) - set(UNCALIBRATED))
    if unknown:
        raise ConfigError(f"{owner}: calibration has unknown field(s) {', '.join(map(str, unknown))}; "
                          f"known: {', '.join(UNCALIBRATED)}")
    result = dict(UNCALIBRATED)
    if table and "label" not in table:
        raise ConfigError(f"{owner}: calibration needs a label saying where its figures come from")
    for name in ("label", "source"):
        if name in table:
            value = table[name]
            if not isinstance(value, str) or len(value) > 2000 or (name == "label" and not value.strip()) \
                    or not value.isprintable():  # shown in tables: one line, no terminal escape codes
                raise ConfigError(f"{owner}: calibration.{name} must be one line of text (at most 2,000 characters)"
                                  f"{', not empty' if name == 'label' else ''}, got {value!r:.60}")
            result[name] = value
    for name in _RATES:
        if name in table:
            result[name] = real_number(table[name], f"{owner}: calibration.{name}", MIN_EFFICIENCY, MAX_EFFICIENCY)
    for name in _OVERHEADS:
        if name in table:
            result[name] = real_number(table[name], f"{owner}: calibration.{name}", 0.0, 3600.0)
    if "kv_bandwidth_efficiency" not in table:
        result["kv_bandwidth_efficiency"] = result["bandwidth_efficiency"]
    if "expected_error" in table:
        result["expected_error"] = real_number(table["expected_error"], f"{owner}: calibration.expected_error",
                                               0.0, 100.0)
    return result


class StepCostModel:
    """The cost of a step of `model` on `hardware` (its calibration included), per device."""

    def __init__(self, model, hardware, plan, overhead_s: float | None = None):
        from kvscope.engine.memory_math import num_parameters

        tp = plan.tensor_parallel_size
        embedding = model.vocab_size * model.hidden_size
        lm_head = embedding
        matmul_params = num_parameters(model) - embedding - (0 if model.tie_word_embeddings else lm_head)
        self.flops_per_token = 2.0 * matmul_params / tp
        self.flops_per_sample = 2.0 * lm_head / tp
        # QK^T and AV: 2 matmuls x 2 FLOPs per multiply-add, per query head and layer
        self.flops_per_attention_pair = 4.0 * model.num_hidden_layers * model.num_attention_heads * model.head_dim / tp
        self.peak_flops = hardware.flops_for(model.weight_dtype)
        self.bandwidth = hardware.memory_bandwidth_bytes_per_s
        self.weight_bytes = plan.weights_bytes / tp
        self.kv_bytes_per_token = plan.kv_bytes_per_token_per_device
        self.tp = tp
        # Megatron-style tensor parallelism: two all-reduces of the 16-bit hidden state per layer
        self.allreduces_per_step = 2 * model.num_hidden_layers
        self.allreduce_bytes_per_token = self.allreduces_per_step * model.hidden_size * 2
        self.link_bandwidth = hardware.interconnect_bandwidth_bytes_per_s or self.bandwidth
        calibration = hardware.calibration
        self.calibration = calibration
        self.seconds_per_flop = 1.0 / (self.peak_flops * calibration["flops_efficiency"])
        self.seconds_per_byte = 1.0 / (self.bandwidth * calibration["bandwidth_efficiency"])
        self.seconds_per_kv_byte = 1.0 / (self.bandwidth * calibration["kv_bandwidth_efficiency"])
        self.overhead_s = calibration["overhead_s"] if overhead_s is None else overhead_s
        self.overhead_per_seq_s = calibration["overhead_per_seq_s"]
        self.overhead_per_token_s = calibration["overhead_per_token_s"]

    def floors(self, num_tokens: int, num_samples: int, attention_pairs: int, kv_read_tokens: int):
        """(compute, weight traffic, KV traffic) in seconds at the peaks: FLOPs at peak FLOP/s, bytes at peak bandwidth."""
        flops = (self.flops_per_token * num_tokens + self.flops_per_sample * num_samples
                 + self.flops_per_attention_pair * attention_pairs)
        kv_bytes = self.kv_bytes_per_token * (kv_read_tokens + num_tokens)
        return flops / self.peak_flops, self.weight_bytes / self.bandwidth, kv_bytes / self.bandwidth

    def cost(self, num_tokens: int, num_samples: int, attention_pairs: int, kv_read_tokens: int,
             num_seqs: int | None = None):
        """(duration, compute floor, memory floor) of one step, in seconds."""
        compute, weights, kv = self.floors(num_tokens, num_samples, attention_pairs, kv_read_tokens)
        compute_s = compute * self.peak_flops * self.seconds_per_flop
        memory_s = (weights * self.seconds_per_byte + kv * self.seconds_per_kv_byte) * self.bandwidth
        seqs = num_samples if num_seqs is None else num_seqs
        duration = ((compute_s if compute_s > memory_s else memory_s) + self.overhead_s
                    + self.overhead_per_seq_s * seqs + self.overhead_per_token_s * num_tokens)
        if self.tp > 1:
            ring = 2 * (self.tp - 1) / self.tp
            duration += ring * self.allreduce_bytes_per_token * num_tokens / self.link_bandwidth
            duration += ALLREDUCE_LATENCY_S * self.allreduces_per_step
        return duration, compute, weights + kv

