"""The multimodal part of vLLM's profile run (sizing/engine/multimodal_profile.py): the phases of
V0's Llama 3.2 Vision profile, counted by hand from vLLM v0.7.0's mllama.py, and the "not
estimated" caveat for vision towers without a rule."""

from __future__ import annotations

import copy

import pytest

from scripts.engine_log_cases import LLAMA32_11B_VISION_CONFIG, LLAMA32_11B_VISION_WIDTHS
from sizing.catalogue import catalogue
from sizing.engine.memory import ActivationShape, activation_peak_bytes, activation_phases, memory_profile
from sizing.engine.multimodal_profile import NOT_ESTIMATED, VisionPart
from sizing.errors import SizingError
from sizing.hf_config import load_config
from sizing.presets import get_preset
from units import GiB

# The cited log's settings: max_num_seqs 128 (one dummy image each), 65,536 batched tokens.
CITED = dict(tp=1, max_num_batched_tokens=65_536, max_num_seqs=128)
# By hand, 128 images of 4 tiles; 560 / 14 = 40, 40² + 1 = 1,601 patches, padded to 1,608.
PIXELS = 2 * 128 * 4 * 3 * 560**2 * 4  # fp32 pixel_values and its padded copy: 3,853,516,800 B
STATE = 128 * 4 * 1608 * 1280 * 2  # one vision hidden state: 2,107,637,760 B (1.96 GiB)
MASK = 128 * (4 * 1608) ** 2 * 2  # bf16 (128, 1, 6432, 6432): 10,590,879,744 B (9.86 GiB)
FC1 = 128 * 4 * 1608 * 5120 * 2  # fc1 output (and GELU's): 8,430,551,040 B
CROSS_TOKENS = 128 * 4 * 1601  # 819,712 encoder tokens
STATES = CROSS_TOKENS * 4096 * 2  # cross-attention states: 6,715,080,704 B (6.25 GiB)


def test_global_vision_encoder_is_the_widest_phase():
    phases = activation_phases(LLAMA32_11B_VISION_WIDTHS, **CITED)
    # Global layer ≥ 1: the mask, the local encoder's tuple (5 saved states + its output), the
    # stack of the 5 saved states, the global input, the layer's input, residual and layer-normed
    # input (15 states) and the fc1 + GELU outputs: 62,920,065,024 B = 58.60 GiB.
    assert phases["global vision encoder"] == PIXELS + MASK + (6 + 5 + 2 + 2) * STATE + 2 * FC1 == 62_920_065_024
    assert activation_peak_bytes(LLAMA32_11B_VISION_WIDTHS, **CITED) == 62_920_065_024
    # Local encoder, layer 31: its input, the 5 saved inputs, layer 31's input (7), residual and
    # norm (2), fc1 + GELU: 50,274,238,464 B = 46.82 GiB.
    assert phases["local vision encoder"] == PIXELS + MASK + 9 * STATE + 2 * FC1
    # The mask is built as a product and then scaled: two copies beside the padded input.
    assert phases["attention mask"] == PIXELS + STATE + 2 * MASK
    # torch.cat of the final and 5 intermediate states, 7,680 values a patch, padding sliced off.
    concat = CROSS_TOKENS * 7680 * 2
    assert phases["vision output concat"] == PIXELS + MASK + 11 * STATE + STATE + concat
    assert phases["projector"] == PIXELS + concat + STATES


def test_cross_attention_phase_by_hand():
    phases = activation_phases(LLAMA32_11B_VISION_WIDTHS, **CITED)
    # qkv_proj of the 819,712 encoder tokens: (32 + 2 × 8) × 128 = 6,144 values each (Q dropped
    # after); K (8 × 128) normalised in fp32: two copies plus the variance and its rsqrt; the
    # decoder's residual, normed input and qkv over 65,536 tokens.
    by_hand = (PIXELS + STATES + 2 * 65_536 * 4096 * 2 + 65_536 * 6144 * 2 + CROSS_TOKENS * 6144 * 2
               + 2 * CROSS_TOKENS * 1024 * 4 + 2 * CROSS_TOKENS * 8 * 4)
    assert phases["cross-attention K/V"] == by_hand == 29_287_809_024  # 27.28 GiB
    # The text forward runs beside the pixels and the states: 65,536 × 2 × (2 × 4,096 + 3 × 14,336).
    assert phases["text forward"] == PIXELS + STATES + 65_536 * 2 * (2 * 4096 + 3 * 14_336)
    assert phases["sampler"] == PIXELS + 10 * 128 * 128_256 * 4


def test_tensor_parallel_halves_the_vision_mlp_only():
    one = activation_phases(LLAMA32_11B_VISION_WIDTHS, **CITED)
    two = activation_phases(LLAMA32_11B_VISION_WIDTHS, **{**CITED, "tp": 2})
    # fc1 is column-parallel and fc2 row-parallel: the hidden states, the mask and the pixels
    # stay whole on every rank; the fc1 and GELU outputs halve (2 × FC1 / 2 saved).
    assert one["global vision encoder"] - two["global vision encoder"] == FC1


def test_a_stage_without_sampler_and_fewer_sequences():
    phases = activation_phases(LLAMA32_11B_VISION_WIDTHS, **CITED, sampler=False)
    assert "sampler" not in phases
    # 8 sequences: 8 dummy images, everything in the vision phase scales by 8 / 128.
    few = activation_phases(LLAMA32_11B_VISION_WIDTHS, tp=1, max_num_batched_tokens=65_536, max_num_seqs=8)
    assert few["global vision encoder"] * 16 == activation_phases(LLAMA32_11B_VISION_WIDTHS, **CITED)[
        "global vision encoder"]


def test_profile_names_the_phase_and_carries_no_caveat():
    profile = memory_profile(total_bytes=80 * GiB, total_measured=True, utilization=0.9, weights_bytes_per_gpu=0,
                             shape=LLAMA32_11B_VISION_WIDTHS, tp=1, max_num_batched_tokens=65_536, max_num_seqs=128)
    assert profile.activation.bytes == 62_920_065_024
    assert "128 dummy images" in profile.activation.basis and "global vision encoder" in profile.activation.basis
    assert profile.notes == () and LLAMA32_11B_VISION_WIDTHS.vision_note == ""


def test_catalogue_vision_models_are_marked_not_estimated():
    multimodal = {e.id for e in catalogue() if ActivationShape.from_config(e.config).vision is not None}
    # Gemma 3 (SigLIP tower, vision_config) and Llama 4 (the copies drop vision_config but keep
    # Llama4ForConditionalGeneration): no profile rule, so the figure is text-only and says so.
    assert multimodal == {"gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "llama-4-scout", "llama-4-maverick"}
    gemma = ActivationShape.from_config(get_preset("gemma-3-4b").config)
    assert not gemma.vision.estimated and gemma.vision_note.startswith(NOT_ESTIMATED)
    assert "siglip_vision_model" in gemma.vision_note
    scout = ActivationShape.from_config(get_preset("llama-4-scout").config)
    assert "no vision_config" in scout.vision_note
    text_only = {**CITED, "max_num_seqs": 256}
    plain = ActivationShape(hidden=gemma.hidden, intermediate=gemma.intermediate, vocab=gemma.vocab)
    assert activation_peak_bytes(gemma, **text_only) == activation_peak_bytes(plain, **text_only)
    profile = memory_profile(total_bytes=80 * GiB, total_measured=True, utilization=0.9, weights_bytes_per_gpu=0,
                             shape=gemma, tp=1, max_num_batched_tokens=8192, max_num_seqs=256)
    assert profile.notes == (gemma.vision_note,) and gemma.vision_note in profile.activation.basis
    assert profile.as_dict()["notes"] == [gemma.vision_note]
    # A measured activation replaces the estimate, and with it the caveat.
    measured = memory_profile(total_bytes=80 * GiB, total_measured=True, utilization=0.9, weights_bytes_per_gpu=0,
                              shape=gemma, tp=1, max_num_batched_tokens=8192, max_num_seqs=256,
                              activation_bytes=GiB)
    assert measured.notes == ()
    assert ActivationShape.from_config(get_preset("llama-3.1-8b").config).vision is None


def test_a_merged_config_reads_the_same_tower():
    # Configs read through sizing.hf_config have text_config merged over the top level (the
    # model_type becomes the text model's); the architecture and tower still name Mllama.
    merged = ActivationShape.from_config(load_config(LLAMA32_11B_VISION_CONFIG))
    assert merged.vision.model_type == "mllama_text_model" and merged.vision == VisionPart(
        model_type="mllama_text_model", mllama=LLAMA32_11B_VISION_WIDTHS.vision.mllama)


def _config(**vision):
    config = copy.deepcopy(LLAMA32_11B_VISION_CONFIG)
    config["vision_config"].update(vision)
    return config


def test_mllama_config_missing_a_key_is_not_estimated():
    config = _config()
    del config["vision_config"]["intermediate_layers_indices"]
    part = VisionPart.from_config(config)
    assert not part.estimated and "vision_config.intermediate_layers_indices missing" in part.note


@pytest.mark.parametrize(("vision", "field"), [
    ({"vision_output_dim": 6400}, "vision_config.vision_output_dim"),  # 1280 × 6 expected
    ({"patch_size": 15}, "vision_config.patch_size"),  # does not divide 560
    ({"intermediate_layers_indices": [3, 3]}, "vision_config.intermediate_layers_indices"),
    ({"intermediate_layers_indices": [32]}, "vision_config.intermediate_layers_indices"),
    ({"intermediate_layers_indices": "3,7"}, "vision_config.intermediate_layers_indices"),
    ({"max_num_tiles": 0}, "vision_config.max_num_tiles"),
    ({"hidden_size": True}, "vision_config.hidden_size"),
    ({"image_size": 1 << 20}, "vision_config.image_size"),
])
def test_bad_vision_config_names_the_key(vision, field):
    with pytest.raises(SizingError) as err:
        VisionPart.from_config(_config(**vision))
    assert err.value.field == field


def test_vision_config_must_be_an_object():
    with pytest.raises(SizingError) as err:
        VisionPart.from_config({"model_type": "mllama", "vision_config": [1280]})
    assert err.value.field == "vision_config"
