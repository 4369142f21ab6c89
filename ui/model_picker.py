"""The sizer's model input: the shipped catalogue (type to filter), a Hugging Face model id, a
manual shape with mixed layer kinds, or an uploaded / pasted config.json.

Each source ends in what :class:`~sizing.request.SizingRequest` takes (a catalogue id or a
:class:`~sizing.models.ModelShape`) and the ``model_source`` it reports. The controls that belong
in a link are declared once in :data:`MODEL_FIELDS` (URL names unchanged from the first presets,
so old links still open the same model); a link's Hub id or layout is parsed like any other
URL value and ignored with a notice when it does not parse. An input that fails is named beside
its widget, and the picker says which model the results still show.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from inputs.errors import InputError, shown
from inputs.uploads import upload_bytes
from sizing import fields as F
from sizing.catalogue import find_entry, search_catalogue
from sizing.hf_config import MAX_CONFIG_BYTES, parse_hf_config
from sizing.hub import HubModel, check_repo_id, resolve_model_id
from sizing.layout_spec import (CONV_CHANNELS, CONV_KERNEL, GROUP_CHANNELS, KV_LORA_RANK, MAX_LAYOUT_CHARS,
                                QK_ROPE_HEAD_DIM, STATE_DTYPES, STATE_GROUPS, STATE_HEADS, STATE_PER_HEAD,
                                layout_shape, parse_layout, parse_terms, recurrent_state)
from sizing.models import ModelShape
from sizing.presets import DEFAULT_PRESET, PRESET_IDS, get_preset
from units import UnitSystem, format_bytes
from ui.field_labels import page_message
from ui.url_state import ChoiceField, NumberField, PageState

# URL values of the source radio; "Preset" is the catalogue's, kept so that old links still work.
MODEL_SOURCES = ("Preset", "Hub", "Manual", "config.json")
SOURCE_LABELS = {"Preset": "Catalogue", "Hub": "Hub model id", "Manual": "Manual", "config.json": "config.json"}
REPORTED_SOURCE = {"Preset": "catalogue", "Hub": "hub", "Manual": "manual", "config.json": "config"}
MAX_SEARCH_CHARS = 100
MAX_REPO_CHARS = 200
HUB_CACHE_S = 600  # a Hub answer (or refusal) is reused for ten minutes, not asked again each rerun


@dataclass(frozen=True)
class TextField:
    """A text input in the URL: ``check`` returns the text it accepts or raises :class:`InputError`.

    Follows :class:`ui.url_state.NumberField`'s protocol (``parse`` / ``format``), so
    :class:`~ui.url_state.PageState` seeds and syncs it like the others.
    """

    url_name: str
    key: str
    default: str
    check: Callable[[str], object]

    def parse(self, raw: str) -> str:
        try:
            self.check(raw)
        except InputError as exc:
            raise InputError(self.url_name, exc.message) from None
        return raw

    def format(self, value: Any) -> str:
        return str(value)


def _layout_syntax(text: str) -> None:
    parse_terms(text)  # the count of layers is checked on the page, against the Layers input


def _model_id_text(text: str) -> None:
    if find_entry(text) is None:  # a catalogue id is welcome in the Hub box too
        check_repo_id(text)


MODEL_FIELDS = (
    ChoiceField("src", "model_source", "Preset", MODEL_SOURCES),
    ChoiceField("model", "preset", DEFAULT_PRESET, PRESET_IDS),
    TextField("hub", "hub_id", "", _model_id_text),
    NumberField("layers", "layers", 80, F.LAYERS),
    NumberField("hd", "head_dim", 128, F.HEAD_DIM),
    NumberField("qh", "q_heads", 64, F.Q_HEADS),
    NumberField("kvh", "kv_heads", 8, F.KV_HEADS),
    NumberField("pb", "params_b", 70.6, F.PARAMS_BILLIONS),
    NumberField("win", "window", 0, F.SLIDING_WINDOW),
    TextField("lay", "layout", "", _layout_syntax),
    NumberField("lora", "kv_lora_rank", 512, KV_LORA_RANK),
    NumberField("rope", "qk_rope_head_dim", 64, QK_ROPE_HEAD_DIM),
    # A Mamba2 layer as Nemotron-H's: 128 heads of 64 × 128 state, 8 groups of 2 × 128 channels.
    NumberField("sk", "state_kernel", 4, CONV_KERNEL),
    NumberField("sch", "state_channels", 8192, CONV_CHANNELS),
    NumberField("sh", "state_heads", 128, STATE_HEADS),
    NumberField("sph", "state_per_head", 8192, STATE_PER_HEAD),
    NumberField("sg", "state_groups", 8, STATE_GROUPS),
    NumberField("sgc", "state_group_channels", 256, GROUP_CHANNELS),
    ChoiceField("sdt", "state_dtype", "bf16", tuple(STATE_DTYPES)),
)


@dataclass(frozen=True, kw_only=True)
class ModelChoice:
    """What the model controls hold: a catalogue id or shape (None while the input is empty or
    refused: the page keeps its last good model) and where it came from."""

    model: ModelShape | str | None
    source: str  # catalogue | hub | config | manual


@dataclass(frozen=True, kw_only=True)
class _HubAnswer:
    model: HubModel | None
    error: tuple[str, str] | None  # (field, message) of a refusal, cached like a model


@st.cache_data(show_spinner=False, max_entries=32)
def cached_config_shape(data: bytes, params: int | None) -> ModelShape:
    return parse_hf_config(data, params=params)


@st.cache_data(show_spinner="Asking the Hugging Face Hub…", max_entries=64, ttl=HUB_CACHE_S)
def cached_hub_answer(model_id: str, endpoint: str) -> _HubAnswer:
    # The endpoint is part of the key: a mirror (HF_ENDPOINT) answers for itself.
    try:
        return _HubAnswer(model=resolve_model_id(model_id, prefer_hub=True, endpoint=endpoint or None), error=None)
    except InputError as exc:
        return _HubAnswer(model=None, error=(exc.field, exc.message))


def model_name(model: ModelShape | str) -> str:
    """The display name of a catalogue id or shape."""
    return get_preset(model).name if isinstance(model, str) else model.name


def show_error(slot: Any, exc: InputError) -> None:
    """The refusal in ``slot``, led by the label of the widget the user typed it into."""
    slot.error(page_message(exc), icon=":material/error:")


# ---- the catalogue -----------------------------------------------------------------------------
def _entry_label(model_id: str) -> str:
    entry = get_preset(model_id)
    return f"{entry.name} · {entry.repo} · {entry.params_billions:,.1f} B"


def catalogue_model(state: PageState) -> str:
    """The catalogue entry chosen; the search box narrows the list (every word must match the
    name, family or Hub repo) and picks the first match when the current one is filtered out."""
    query = st.text_input("Search the catalogue", key=state.key("catalogue_search"), max_chars=MAX_SEARCH_CHARS,
                          placeholder="name, family or Hub repo: qwen3 a3b, gemma 3, deepseek-ai …")
    matches = [entry.id for entry in search_catalogue(query[:MAX_SEARCH_CHARS])]
    preset_key = state.key("preset")
    if query.strip() and not matches:
        st.caption(f":material/search_off: No catalogue model matches {shown(query)}; all {len(PRESET_IDS)} listed.")
        matches = list(PRESET_IDS)
    elif st.session_state.get(preset_key) not in matches:
        st.session_state[preset_key] = matches[0]
    if query.strip():
        st.caption(f"{len(matches)} of {len(PRESET_IDS)} models match.")
    model_id = st.selectbox("Model", matches, key=preset_key, format_func=_entry_label,
                            help="Type here too: the list filters as you type.")
    entry = get_preset(model_id)
    st.caption(f"[config.json]({entry.source}) · {entry.params_billions:,.1f} B params ({entry.params_source}) "
               f"· {entry.shape.layout} {entry.note}")
    if not entry.verified:
        st.caption(":material/warning: Sizing keys, unverified: this entry was not checked against the published "
                   "config.json (see data/models/README.md).")
    return model_id


# ---- a Hub id ----------------------------------------------------------------------------------
def hub_model(state: PageState) -> ModelChoice:
    """The model at a Hub repo id, through :mod:`sizing.hub` (the shipped copy when the Hub is
    unreachable, which is then said); None while the box is empty."""
    text = st.text_input("Hugging Face model id", key=state.key("hub_id"), max_chars=MAX_REPO_CHARS,
                         placeholder="Qwen/Qwen3-32B",
                         help="config.json and model.safetensors.index.json are read with huggingface_hub; "
                              "gated repos need HF_TOKEN in the server's environment.")
    if not text.strip():
        st.info("Type a repo id such as `Qwen/Qwen3-32B`, or a catalogue id.", icon=":material/info:")
        return ModelChoice(model=None, source="hub")
    answer = cached_hub_answer(text.strip(), os.environ.get("HF_ENDPOINT", ""))
    if answer.error is not None:
        raise InputError(*answer.error)
    hub = answer.model
    if hub.notice:
        st.warning(hub.notice[0].upper() + hub.notice[1:] + ".", icon=":material/cloud_off:")
    if hub.source == "hub":
        weights = ("safetensors total " + format_bytes(hub.safetensors_bytes, UnitSystem.DECIMAL)
                   if hub.safetensors_bytes else "no safetensors index: weights estimated from the config")
        st.caption(f"From the Hub: [{hub.repo_id}](https://huggingface.co/{hub.repo_id}) · {weights} · "
                   f"{hub.shape.layout}")
        return ModelChoice(model=hub.shape, source="hub")
    st.caption(f"From the shipped catalogue: {model_name(hub.catalogue_id)}")
    return ModelChoice(model=hub.catalogue_id, source="catalogue")


# ---- manual entry ------------------------------------------------------------------------------
def _state_sizes(state: PageState, kind: str):
    with st.expander(f"State of each {kind} layer", expanded=True):
        c1, c2 = st.columns(2)
        c1.number_input("Conv kernel", step=1, key=state.key("state_kernel"))
        c2.number_input("Conv channels", step=1, key=state.key("state_channels"),
                        help="Split over TP; Mamba2: the inner width; gated delta net: 2 × key dim + value dim.")
        c1.number_input("State heads", step=1, key=state.key("state_heads"))
        c2.number_input("State values per head", step=1, key=state.key("state_per_head"),
                        help="Mamba2: head dim × state size; gated delta net: key dim × value dim per head.")
        c1.number_input("B/C groups (0 = none)", step=1, key=state.key("state_groups"))
        c2.number_input("Channels per group", step=1, key=state.key("state_group_channels"),
                        help="Mamba2: 2 × state size.")
        st.selectbox("State dtype", tuple(STATE_DTYPES), key=state.key("state_dtype"))
    v = state.value
    return recurrent_state(kind, conv_kernel=v("state_kernel"), conv_channels=v("state_channels"),
                           heads=v("state_heads"), state_per_head=v("state_per_head"), groups=v("state_groups"),
                           group_channels=v("state_group_channels"), dtype=v("state_dtype"))


def manual_model(state: PageState) -> ModelShape:
    """A shape typed in: heads and sizes, and optionally a layout of mixed layer kinds."""
    key = state.key
    layout_text = st.text_input(
        "Layer layout (blank: every layer the same)", key=key("layout"), max_chars=MAX_LAYOUT_CHARS,
        placeholder="18 full + 18 sliding(128)   or   5 sliding(1024) : 1 full",
        help="Terms joined by + are laid out once each; joined by : they repeat over the layers. Kinds: "
             "full, sliding(W), chunked(C), mla, mamba, linear, mlp.")
    c1, c2 = st.columns(2)
    c1.number_input("Layers", step=1, key=key("layers"))
    c2.number_input("Head dim", step=1, key=key("head_dim"))
    c1.number_input("Query heads", step=1, key=key("q_heads"))
    c2.number_input("KV heads", step=1, key=key("kv_heads"))
    c1.number_input("Parameters (billions)", step=0.1, key=key("params_b"), format="%.2f")
    c2.number_input("Sliding window (0 = none)", step=1, key=key("window"), disabled=bool(layout_text.strip()),
                    help="Applied to every layer when no layout is given.")
    s = st.session_state
    if not layout_text.strip():
        return F.manual_shape(layers=s[key("layers")], q_heads=s[key("q_heads")], kv_heads=s[key("kv_heads")],
                              head_dim=s[key("head_dim")], params_billions=s[key("params_b")], window=s[key("window")])
    layout = parse_layout(layout_text, layers=F.LAYERS.check(s[key("layers")]))
    if layout.has_mla:
        c1, c2 = st.columns(2)
        c1.number_input("MLA latent (kv_lora_rank)", step=1, key=key("kv_lora_rank"))
        c2.number_input("RoPE key (qk_rope_head_dim)", step=1, key=key("qk_rope_head_dim"))
    recurrent = _state_sizes(state, layout.state_kind) if layout.state_kind else None
    return layout_shape(layout, q_heads=F.Q_HEADS.check(s[key("q_heads")]),
                        kv_heads=F.KV_HEADS.check(s[key("kv_heads")]), head_dim=F.HEAD_DIM.check(s[key("head_dim")]),
                        params=F.params_from_billions(s[key("params_b")]), kv_lora_rank=s[key("kv_lora_rank")],
                        qk_rope_head_dim=s[key("qk_rope_head_dim")], state=recurrent)


# ---- config.json -------------------------------------------------------------------------------
def config_model(state: PageState) -> ModelShape | None:
    """The uploaded or pasted config's shape; None while there is neither."""
    key = state.key
    # The widget's limit is whole MiB (it says "1MB per file"); the parser's 1,000,000 B cap refuses the rest.
    uploaded = st.file_uploader("config.json", type=["json"], key=key("config_upload"),
                                max_upload_size=max(1, MAX_CONFIG_BYTES // 2**20))
    pasted = st.text_area("…or paste it", key=key("config_text"), height=120,
                          placeholder='{"num_hidden_layers": 32, "num_attention_heads": 32, ...}')
    params_b = st.number_input("Parameters (billions, 0 = estimate from the config)", min_value=0.0,
                               value=0.0, step=0.1, key=key("config_params_b"))
    # Uploaded content is only ever bytes, refused over the parser's cap before it is parsed.
    data = upload_bytes(uploaded.getvalue(), MAX_CONFIG_BYTES, field="config.json") if uploaded else pasted.encode()
    if not data.strip():
        st.info("Upload or paste a Hugging Face config.json.", icon=":material/info:")
        return None
    return cached_config_shape(data, F.config_params(params_b))


# ---- all sources -------------------------------------------------------------------------------
def model_controls(state: PageState, shown_model: str) -> ModelChoice:
    """The model the controls describe; when they hold none (empty or refused), says that the
    results still show ``shown_model``, the last good one."""
    st.subheader("Model")
    source = st.radio("Model source", MODEL_SOURCES, horizontal=True, key=state.key("model_source"),
                      format_func=SOURCE_LABELS.get)
    choice = ModelChoice(model=None, source=REPORTED_SOURCE[source])
    try:
        if source == "Preset":
            choice = ModelChoice(model=catalogue_model(state), source="catalogue")
        elif source == "Hub":
            choice = hub_model(state)
        elif source == "Manual":
            choice = ModelChoice(model=manual_model(state), source="manual")
        else:
            choice = ModelChoice(model=config_model(state), source="config")
    except InputError as exc:
        show_error(st, exc)
    if choice.model is None:
        st.caption(f":material/history: Showing the last good model, **{shown_model}**, until this input "
                   "gives one.")
    return choice
