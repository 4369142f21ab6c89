"""The over-time simulation's step cost from the planner's bandwidth and compute model.

The planner's decode step (``planner.capacity.decode_step``) reads the weights once plus every
cached token's KV, and spends ``2 × params`` FLOPs per new token plus the attention FLOPs per
cached token. Written as the coefficients of :class:`simulation.step_cost.StepCost`, the same
formulas also time prefill chunks and mixed batches (chunked prefill), so the simulation's
step times, batch sizes and TPOT follow the chosen model and GPU. The simulation never imports
this module: the page and the tests compose the two.
"""

from __future__ import annotations

from hardware.gpus import get_gpu
from planner.bandwidth import BandwidthEstimate
from planner.capacity import FLOPS_PER_PARAM_PER_TOKEN, GpuSpec, ModelCost, effective_bandwidth, effective_flops
from planner.plan import gpu_spec, model_cost
from simulation.step_cost import StepCost
from sizing.hf_config import parse_hf_config
from sizing.models import ModelShape
from sizing.precisions import get_precision

# facebook/opt-13b's config.json (the PagedAttention paper's figure-2 model): 40 layers of 40
# heads × 128 over a 5,120 hidden size, 20,480 FFN, 2,048 positions, FP16. Published size: 13B.
OPT_13B_CONFIG = {
    "model_type": "opt", "hidden_size": 5120, "num_attention_heads": 40, "num_hidden_layers": 40,
    "ffn_dim": 20480, "max_position_embeddings": 2048, "vocab_size": 50272, "torch_dtype": "float16",
    "word_embed_proj_dim": 5120, "do_layer_norm_before": True,
}
OPT_13B_PARAMS = 13_000_000_000
# The paper's GPU for OPT-13B (its Table 1).
PAPER_GPU_ID = "a100-40gb"
# Datasheet figures, efficiency 1: the paper publishes no measured rates, so the roofline is
# the upper bound it is, and the label says so.
DATASHEET = BandwidthEstimate(source="datasheet", bandwidth_efficiency=1.0, compute_efficiency=1.0,
                              label="datasheet bandwidth and bf16/fp16 rate (efficiency 1, an upper bound)")


def step_cost(model: ModelCost, gpu: GpuSpec, estimate: BandwidthEstimate) -> StepCost:
    """The roofline coefficients of ``model`` on one GPU of its replica.

    ``StepCost.seconds(context=b·L, computed=b, pairs=b·L)`` equals
    ``planner.capacity.decode_step(batch=b, context=L).step_s``.
    """
    bandwidth, flops = effective_bandwidth(gpu, estimate), effective_flops(gpu, estimate)
    return StepCost(
        fixed_s=model.weight_bytes_per_gpu / bandwidth,
        per_context_token_s=model.kv_bytes_per_token_per_gpu / bandwidth,
        per_token_s=FLOPS_PER_PARAM_PER_TOKEN * model.params_per_gpu / flops,
        per_attention_pair_s=model.attention_flops_per_context_token_per_gpu / flops,
        label=f"{model.name} on {gpu.name} (TP {model.tp}): {estimate.label}",
    )


def shape_step_cost(shape: ModelShape, *, gpu_id: str, precision: str = "bf16", tp: int = 1,
                    estimate: BandwidthEstimate = DATASHEET) -> StepCost:
    """The step cost of a sizer model shape (weights and KV at ``precision``) on a catalogue GPU."""
    chosen = get_precision(precision)
    cost = model_cost(shape, kv_precision=chosen, weight_precision=chosen, tp=tp)
    return step_cost(cost, gpu_spec(get_gpu(gpu_id)), estimate)


def opt_13b_shape() -> ModelShape:
    """OPT-13B as the sizer reads its config.json."""
    return parse_hf_config(OPT_13B_CONFIG, name="OPT-13B", params=OPT_13B_PARAMS)


def paper_step_cost() -> StepCost:
    """OPT-13B in FP16 on one A100-40GB: the PagedAttention paper's figure-2 setting."""
    return shape_step_cost(opt_13b_shape(), gpu_id=PAPER_GPU_ID, precision="fp16")
