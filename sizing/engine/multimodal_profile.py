"""The multimodal part of vLLM's profile run: dummy images through the vision tower.

vLLM profiles a multimodal model with dummy multimodal inputs, so its "activation peak" is the
vision tower's working set at the dummy batch, far above the text forward pass. Each rule here is
read from one vLLM code path; a vision tower without a rule is reported as not estimated.

**Llama 3.2 Vision (``mllama``), vLLM V0.** ``EncoderDecoderModelRunner.profile_run``
(``vllm/worker/enc_dec_model_runner.py``, checked against v0.7.0) builds ``max_num_seqs``
sequence groups of ``max_num_batched_tokens // max_num_seqs`` decoder tokens, each with the
encoder dummy data of ``dummy_encoder_data_for_mllama`` (``vllm/model_executor/models/mllama.py``):
``--limit-mm-per-prompt`` images (1 by default) of 1024 × 1024 pixels, which the image processor
tiles 2 × 2, the ``max_num_tiles`` (4) tiles of ``image_size`` (560) pixels. All the images go
through ``MllamaVisionModel`` in one batch. With ``n`` images, ``P = (image_size / patch_size)² + 1``
patches a tile (1,601, with the class token), padded to ``P'`` (a multiple of 8: 1,608),
``N = n × tiles × P'`` vision tokens of ``h`` (1,280) values, ``A = N × h × 2 B`` one hidden state:

* pixels: the batched ``pixel_values`` and the padded copy ``_parse_and_validate_image_input``
  makes, both fp32: ``2 × n × tiles × 3 × image_size² × 4 B``;
* the aspect-ratio attention mask ``_prepare_aspect_ratio_attention_mask`` builds, bf16
  ``(n, 1, tiles × P', tiles × P')``, alive for both encoders (twice while it is built);
* the local encoder (``num_hidden_layers``, 32) keeps the inputs of the ``intermediate_layers_indices``
  layers (5) in the tuple it returns; ``torch.stack`` copies them (``s × A``) while the tuple, held by
  ``output``, stays alive until the vision forward returns;
* a layer's MLP holds its input, the post-attention residual, the layer-normed input and the fc1
  and GELU outputs (``2 × N × intermediate / TP × 2 B``); the global encoder (8 gated layers) runs
  beside the mask, the tuple and the stack, which makes its MLP the peak;
* ``torch.cat`` of the final and the intermediate states (``vision_output_dim`` = 7,680 values a
  patch, padding sliced off), the projector's output in the text width (the cross-attention
  states, ``n × tiles × P × hidden × 2 B``);
* each cross-attention layer projects those states through the whole ``qkv_proj`` (the Q part is
  computed and dropped) and normalises K in fp32 (``MllamaTextRMSNorm``: two fp32 copies).

The text forward (``max_num_batched_tokens``) and the sampler (one row a sequence) then run with
the pixels and the cross-attention states still allocated. The peak is the largest of these
phases; V1's ``gpu_model_runner.profile_run`` sizes its dummy batch differently (the encoder budget,
``max(max_num_batched_tokens, tokens of one item)`` tokens, gives ``ceil(budget / tokens per item)``
items, at most ``max_num_seqs`` × the per-prompt limit), and is not modelled for Mllama.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sizing.errors import SizingError
from sizing.models import check_int
from units import cdiv

ACTIVATION_BYTES = 2  # bf16 / fp16 activations and the bf16 mask
PIXEL_BYTES = 4  # the image processor's fp32 pixel values
NORM_BYTES = 4  # MllamaTextRMSNorm computes in fp32
IMAGES_PER_PROMPT = 1  # vLLM's default --limit-mm-per-prompt for images
PATCH_PADDING = 8  # MllamaVisionModel pads each tile's patches to a multiple of 8
MLLAMA = "mllama"
MLLAMA_TOWER = "mllama_vision_model"
MLLAMA_ARCHITECTURE = "MllamaForConditionalGeneration"
MAX_VISION_WIDTH = 1 << 16
NOT_ESTIMATED = "activation of the vision part not estimated"
# MllamaVision's fields and the config keys they are read from (vLLM's MllamaVisionModel and
# MllamaTextCrossAttention read the same keys).
_CONFIG_KEYS = {
    "hidden": ("vision_config", "hidden_size"), "intermediate": ("vision_config", "intermediate_size"),
    "heads": ("vision_config", "attention_heads"), "layers": ("vision_config", "num_hidden_layers"),
    "global_layers": ("vision_config", "num_global_layers"),
    "saved_layers": ("vision_config", "intermediate_layers_indices"),
    "image_size": ("vision_config", "image_size"), "patch_size": ("vision_config", "patch_size"),
    "max_tiles": ("vision_config", "max_num_tiles"), "channels": ("vision_config", "num_channels"),
    "output_dim": ("vision_config", "vision_output_dim"), "text_hidden": ("text_config", "hidden_size"),
    "text_q_heads": ("text_config", "num_attention_heads"), "text_kv_heads": ("text_config", "num_key_value_heads"),
}
_HIGH = {"hidden": MAX_VISION_WIDTH, "intermediate": MAX_VISION_WIDTH, "image_size": MAX_VISION_WIDTH,
         "text_hidden": 1 << 22, "output_dim": 1 << 22}


@dataclass(frozen=True, kw_only=True)
class MllamaVision:
    """The Llama 3.2 Vision tower and the text widths its cross-attention states meet.

    Vision widths in values (``vision_config``); ``saved_layers`` are the local encoder's
    ``intermediate_layers_indices``; ``text_*`` from ``text_config`` (the cross-attention layers'
    ``qkv_proj``; head dim ``text_hidden / text_q_heads``, as vLLM's ``MllamaTextCrossAttention``).
    """

    hidden: int
    intermediate: int
    heads: int
    layers: int
    global_layers: int
    saved_layers: tuple[int, ...]
    image_size: int
    patch_size: int
    max_tiles: int
    channels: int
    output_dim: int
    text_hidden: int
    text_q_heads: int
    text_kv_heads: int

    def __post_init__(self) -> None:
        for name, (section, key) in _CONFIG_KEYS.items():
            if name != "saved_layers":
                low = 0 if name == "global_layers" else 1
                check_int(f"{section}.{key}", getattr(self, name), low=low, high=_HIGH.get(name, 1 << 12))
        if self.hidden % self.heads:
            raise SizingError("vision_config.attention_heads", f"{self.heads} heads do not divide hidden_size {self.hidden}")
        if self.image_size % self.patch_size:
            raise SizingError("vision_config.patch_size", f"{self.patch_size} does not divide image_size {self.image_size}")
        if self.text_hidden % self.text_q_heads:
            raise SizingError("text_config.num_attention_heads",
                              f"{self.text_q_heads} heads do not divide hidden_size {self.text_hidden}")
        if len(set(self.saved_layers)) != len(self.saved_layers) or any(
                not 0 <= i < self.layers for i in self.saved_layers):
            raise SizingError("vision_config.intermediate_layers_indices",
                              f"must be distinct layer indices below num_hidden_layers {self.layers}, "
                              f"got {list(self.saved_layers)!r:.80}")
        if self.output_dim != (len(self.saved_layers) + 1) * self.hidden:
            raise SizingError("vision_config.vision_output_dim",
                              f"must be hidden_size × (intermediate layers + 1) = "
                              f"{(len(self.saved_layers) + 1) * self.hidden:,} (the concatenated states), "
                              f"got {self.output_dim:,}")

    @property
    def patches_per_tile(self) -> int:
        """Patches of one tile plus the class token (1,601 for 560 / 14)."""
        return (self.image_size // self.patch_size) ** 2 + 1

    @property
    def padded_patches(self) -> int:
        """``patches_per_tile`` padded to a multiple of 8 (1,608)."""
        return cdiv(self.patches_per_tile, PATCH_PADDING) * PATCH_PADDING

    @property
    def tokens_per_image(self) -> int:
        """Cross-attention (encoder) tokens of one image at ``max_tiles`` tiles (6,404)."""
        return self.max_tiles * self.patches_per_tile

    def _layer_work(self, tokens: int, tp: int) -> int:
        """Bytes one encoder layer allocates beyond its input, at its widest moment: the
        attention (layer norm, ``qkv_proj``, SDPA output and its contiguous copy, ``o_proj``) or
        the MLP (residual, layer norm, fc1 and GELU outputs)."""
        state = tokens * self.hidden * ACTIVATION_BYTES
        heads = tokens * cdiv(self.heads, tp) * (self.hidden // self.heads) * ACTIVATION_BYTES
        attention = state + 3 * heads + heads + max(heads, state)
        mlp = 2 * state + 2 * tokens * cdiv(self.intermediate, tp) * ACTIVATION_BYTES
        return max(attention, mlp)

    def phases(self, *, images: int, tokens: int, tp: int, text_forward: int, sampler: int) -> dict[str, int]:
        """Bytes alive at the widest moment of each phase of V0's profile forward, per GPU.

        ``images`` dummy images, ``tokens`` decoder tokens (``max_num_batched_tokens``);
        ``text_forward`` / ``sampler``: the text-only estimates of those phases, which run with
        the pixels (and, for the forward, the cross-attention states) still allocated.
        """
        check_int("images", images, high=1 << 20)
        check_int("tokens", tokens, high=1 << 24)
        check_int("tp", tp, high=4096)
        tiles, width = self.max_tiles, self.hidden
        vision_tokens = images * tiles * self.padded_patches
        state = vision_tokens * width * ACTIVATION_BYTES
        pixels = 2 * images * tiles * self.channels * self.image_size ** 2 * PIXEL_BYTES
        mask = images * (tiles * self.padded_patches) ** 2 * ACTIVATION_BYTES
        saved = len(self.saved_layers)
        work = self._layer_work(vision_tokens, tp)
        # Hidden states alive in the local encoder's last layer: the encoder input, the saved
        # inputs of the intermediate layers and the last layer's own input (sets: one tensor each).
        local_states = len({0, self.layers - 1, *self.saved_layers})
        # The tuple (saved states and the local output) and their stack, beside the global input
        # and, from its second layer on, that layer's input.
        kept = (saved + 1) * state + saved * state
        cross_tokens = images * self.tokens_per_image
        concat = cross_tokens * self.output_dim * ACTIVATION_BYTES
        states = cross_tokens * self.text_hidden * ACTIVATION_BYTES
        head_dim = self.text_hidden // self.text_q_heads
        qkv_heads = cdiv(self.text_q_heads, tp) + 2 * cdiv(self.text_kv_heads, tp)
        key_fp32 = cross_tokens * cdiv(self.text_kv_heads, tp) * head_dim * NORM_BYTES
        key_stats = cross_tokens * cdiv(self.text_kv_heads, tp) * NORM_BYTES  # variance, its rsqrt
        text_states = tokens * self.text_hidden * ACTIVATION_BYTES
        phases = {
            "attention mask": pixels + state + 2 * mask,
            "local vision encoder": pixels + mask + local_states * state + work,
            "vision output concat": pixels + mask + kept + state + concat,
            "projector": pixels + concat + states + (states // tp if tp > 1 else 0),
            "cross-attention K/V": (pixels + states + 2 * text_states + tokens * qkv_heads * head_dim * ACTIVATION_BYTES
                                    + cross_tokens * qkv_heads * head_dim * ACTIVATION_BYTES
                                    + 2 * key_fp32 + 2 * key_stats),
            "text forward": pixels + states + text_forward,
            "sampler": pixels + sampler,
        }
        if self.global_layers:
            phases["global vision encoder"] = (pixels + mask + kept + min(self.global_layers, 2) * state + work)
        return phases


@dataclass(frozen=True, kw_only=True)
class VisionPart:
    """A model's vision tower as its config describes it: ``mllama`` when the profile rule is
    known (Llama 3.2 Vision), else None and ``missing`` says why the vision activation is not
    estimated (the tower's ``model_type``, or the key the rule needs)."""

    model_type: str
    mllama: MllamaVision | None = None
    missing: str = ""

    @property
    def estimated(self) -> bool:
        return self.mllama is not None

    @property
    def note(self) -> str:
        """"" when the vision part is estimated; else the caveat the profile carries."""
        return "" if self.estimated else f"{NOT_ESTIMATED} ({self.missing})"

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> VisionPart | None:
        """The vision part of a Hugging Face config; None for a text-only model.

        A model is taken as multimodal when it has a ``vision_config`` or a
        ``…ForConditionalGeneration`` architecture (copies of Llama 4 configs keep the
        architecture and drop ``vision_config``)."""
        vision = config.get("vision_config")
        architectures = config.get("architectures")
        architectures = [a for a in architectures if isinstance(a, str)] if isinstance(architectures, list) else []
        conditional = [a for a in architectures if a.endswith("ForConditionalGeneration")]
        model_type = config.get("model_type")
        model_type = model_type if isinstance(model_type, str) else "unknown"
        name = conditional[0] if conditional else model_type
        if not isinstance(vision, Mapping):
            if vision is not None:
                raise SizingError("vision_config", f"must be an object, got {type(vision).__name__}")
            if not conditional:
                return None
            return cls(model_type=model_type, missing=f"{name}: the config has no vision_config")
        tower = vision.get("model_type")
        # A catalogue config has text_config merged over the top level (model_type becomes the
        # text model's), so the architecture and the tower identify the family as well.
        if not (tower == MLLAMA_TOWER or model_type == MLLAMA or MLLAMA_ARCHITECTURE in architectures):
            tower = f", vision tower {tower}" if isinstance(tower, str) else ""
            return cls(model_type=model_type, missing=f"no profile rule for {name}{tower}")
        text = config.get("text_config")
        text = text if isinstance(text, Mapping) else config
        values: dict[str, Any] = {}
        sections = {"vision_config": vision, "text_config": text}
        for field, (where, key) in _CONFIG_KEYS.items():
            section = sections[where]
            if key not in section:
                return cls(model_type=model_type, missing=f"{where}.{key} missing from the config")
            value = section[key]
            if field == "saved_layers":
                if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                          for i in value):
                    raise SizingError(f"{where}.{key}", f"must be a list of layer indices, got {value!r:.80}")
                value = tuple(value)
            else:
                value = check_int(f"{where}.{key}", value, low=0, high=1 << 22)
            values[field] = value
        return cls(model_type=model_type, mllama=MllamaVision(**values))


__all__ = ["IMAGES_PER_PROMPT", "MllamaVision", "NOT_ESTIMATED", "VisionPart"]
