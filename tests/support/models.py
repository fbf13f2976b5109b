"""Tiny random models of every supported family, built from transformers' own config classes (2 layers, 4 heads,
hidden 32), each saved with a tokenizer whose special tokens match the config's ids: the encoder families
(FAMILY_KINDS) and the decoder-only ones (DECODER_KINDS: causal, grouped-query, some with sliding windows, each with a
byte-level BPE trained here) and the encoder-decoders (ENCODER_DECODER_KINDS: T5 and Marian with a SentencePiece-style
Unigram, BART with RoBERTa's byte-level BPE). tests/conftest.py serves them as fixtures; nothing here downloads anything."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch

from attnlib.core.model import bundled_model_path
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE

# every family the library supports, and fine-tuned (classification-head) checkpoints of two of them
FAMILY_KINDS = (
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "distilbert",
    "albert",
    "electra",
    "ernie",
    "deberta",
    "deberta-v2",
    "modernbert",
    "mpnet",
    "roformer",
    "bert-classifier",
    "deberta-v2-tokens",
)
BPE_KINDS = ("roberta", "xlm-roberta", "camembert")  # byte-level BPE with <s> ... </s>; the rest use WordPiece
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
MODERNBERT_WINDOW = 2  # half-width of ModernBERT's local layer: |i - j| <= 2, shorter than every test sentence

# decoder-only families, and a fine-tuned (sequence-classification) Llama; every one causal, rotary where it has it
DECODER_KINDS = (
    "gpt2",
    "llama",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3",
    "mistral",
    "phi3",
    "opt",
    "gpt-neox",
    "llama-classifier",
)
DECODER_WINDOW = 3  # transformers' sliding window: a query at i sees keys j with 0 <= i - j < 3 (itself and 2 before)
# which layers slide: all of Mistral's; Gemma 2's and Gemma 3's layer 0 (layer 1 attends to the whole prefix)
DECODER_SLIDING_LAYERS = {"mistral": (0, 1), "gemma2": (0,), "gemma3": (0,)}
# key/value heads of the 4 query heads: query head h reads key/value head h // (4 // n); the families left out have 4
DECODER_KV_HEADS = {
    "llama": 2,
    "llama-classifier": 2,
    "qwen2": 2,
    "qwen3": 2,
    "mistral": 2,
    "phi3": 2,
    "gemma": 1,  # multi-query, as gemma-2b
    "gemma2": 2,
    "gemma3": 2,
}

# families outside the library's list, whose layout the library finds in the model and checks (attnlib.core.found):
# decoders (mixtures of experts, partial rotary, parallel residuals, fused and multi-query projections, ALiBi) and
# encoder-decoders whose parent is listed (mT5: T5's; mBART: BART's paths, but pre-LN)
FOUND_LAYOUT_KINDS = (
    "mixtral",
    "qwen2-moe",
    "stablelm",
    "phi",
    "gpt-bigcode",
    "falcon",
    "bloom",
    "gptj",
    "mt5",
    "mbart",
)
FOUND_ENCODER_DECODER_KINDS = ("mt5", "mbart")
LOGIT_SCALE_KINDS = ("cohere",)  # a found layout whose head multiplies its logits by a logit scale (METHODS §21)

# models without attention layers (a state-space model, a recurrent one): refused on every command and page
NO_ATTENTION_KINDS = ("mamba", "rwkv")

# encoder-decoders: T5 (relative position bias, no CLS), BART (learned positions, <s> ... </s>), Marian (sinusoidal)
ENCODER_DECODER_KINDS = ("t5", "bart", "marian")
# each Unigram kind's special tokens as the vocabulary's first ids, its eos, unk and pad (the decoder's start token)
UNIGRAM_SPECIALS = {
    "t5": dict(vocabulary=("<pad>", "</s>", "<unk>"), eos="</s>", unk="<unk>", pad="<pad>"),
    "marian": dict(vocabulary=("</s>", "<unk>", "<pad>"), eos="</s>", unk="<unk>", pad="<pad>"),
}


def _specials(vocabulary, bos, eos, unk, pad, add_bos):
    return dict(vocabulary=vocabulary, bos=bos, eos=eos, unk=unk, pad=pad, add_bos=add_bos)


# each kind's special tokens as its real tokenizer has them: the vocabulary's first ids, in order, then which is the
# bos, eos, unk and pad token, and the token put before every encoded text (add_bos; None: nothing is added)
_END = "<|endoftext|>"
_LLAMA_SPECIALS = _specials(("<unk>", "<s>", "</s>"), "<s>", "</s>", "<unk>", None, "<s>")
_QWEN_SPECIALS = _specials((_END,), None, _END, None, _END, None)  # no BOS at all
_GEMMA_SPECIALS = _specials(("<pad>", "<eos>", "<bos>", "<unk>"), "<bos>", "<eos>", "<unk>", "<pad>", "<bos>")
DECODER_SPECIALS = {
    "gpt2": _specials((_END,), _END, _END, _END, None, None),
    # Pythia: "<|padding|>" is id 1 of the vocabulary, but not the tokenizer's pad token
    "gpt-neox": _specials((_END, "<|padding|>"), _END, _END, _END, None, None),
    # facebook/opt-*: GPT-2's BPE with RoBERTa's first four ids; "</s>" is bos, eos and unk, and starts every text
    "opt": _specials(("<s>", "<pad>", "</s>", "<unk>"), "</s>", "</s>", "</s>", "<pad>", "</s>"),
    "llama": _LLAMA_SPECIALS,
    "mistral": _LLAMA_SPECIALS,
    # a fine-tuned classifier needs a pad token (its head reads the last token that is not padding)
    "llama-classifier": _specials(("<unk>", "<s>", "</s>", "<pad>"), "<s>", "</s>", "<unk>", "<pad>", "<s>"),
    # Phi-3-mini: eos and pad are <|endoftext|>
    "phi3": _specials(("<unk>", "<s>", "</s>", _END), "<s>", _END, "<unk>", _END, "<s>"),
    "qwen2": _QWEN_SPECIALS,
    "qwen3": _QWEN_SPECIALS,
    "gemma": _GEMMA_SPECIALS,
    "gemma2": _GEMMA_SPECIALS,
    "gemma3": _GEMMA_SPECIALS,
}


def bert_tokenizer():
    """The bundled model's uncased WordPiece tokenizer, 64 tokens at most."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(bundled_model_path()))
    tokenizer.model_max_length = 64
    return tokenizer


def _classroom_lines() -> list[str]:
    """The classroom set's sentences, one a line (each pair's two sentences on two lines): the BPE training text."""
    return CLASSROOM_SINGLE.read_text().splitlines() + CLASSROOM_PAIRS.read_text().replace("\t", "\n").splitlines()


@cache
def _bpe_vocabulary():
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(
        _classroom_lines(), vocab_size=600, min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    )
    return bpe


def roberta_tokenizer():
    """A byte-level BPE tokenizer trained in-process on the classroom set, with RoBERTa's special tokens."""
    from tokenizers.processors import RobertaProcessing
    from transformers import RobertaTokenizerFast

    bpe = _bpe_vocabulary()
    bpe._tokenizer.post_processor = RobertaProcessing(
        ("</s>", bpe.token_to_id("</s>")), ("<s>", bpe.token_to_id("<s>"))
    )
    return RobertaTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        model_max_length=64,
    )


def tokenizer_for(kind: str):
    """The tokenizer a tiny model of this kind is saved with."""
    if kind in DECODER_KINDS:
        return decoder_tokenizer_for(kind)
    if kind in FOUND_ENCODER_DECODER_KINDS:
        return unigram_tokenizer("t5") if kind == "mt5" else roberta_tokenizer()
    if kind in (*FOUND_LAYOUT_KINDS, *LOGIT_SCALE_KINDS):
        return decoder_tokenizer_for("gpt2" if kind in ("gpt-bigcode", "gptj", "falcon", "bloom", "phi") else "llama")
    if kind in NO_ATTENTION_KINDS:
        return decoder_tokenizer_for("gpt2")
    if kind in UNIGRAM_SPECIALS:
        return unigram_tokenizer(kind)
    return roberta_tokenizer() if kind in (*BPE_KINDS, "bart") else bert_tokenizer()


def _ids(tokenizer) -> dict:
    """The config's special-token ids, from the tokenizer."""
    return dict(
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id
    )


def tiny_config(kind: str, tokenizer):
    """A 2-layer, 4-head, hidden-32 config of this kind (vocabulary and special ids from the tokenizer); decoder kinds
    from tiny_decoder_config."""
    import transformers as tf

    if kind in DECODER_KINDS:
        return tiny_decoder_config(kind, tokenizer)
    if kind in ENCODER_DECODER_KINDS:
        return tiny_encoder_decoder_config(kind, tokenizer)
    if kind in NO_ATTENTION_KINDS:
        return tiny_no_attention_config(kind, tokenizer)
    if kind in (*FOUND_LAYOUT_KINDS, *LOGIT_SCALE_KINDS):
        return tiny_found_layout_config(kind, tokenizer)
    vocab, ids = len(tokenizer), _ids(tokenizer)
    positions = dict(max_position_embeddings=66 if kind in (*BPE_KINDS, "mpnet") else 64)
    if kind in ("bert", "bert-classifier"):
        return tf.BertConfig(vocab_size=vocab, **SIZES, **positions, **ids)
    if kind in BPE_KINDS:
        config_class = {
            "roberta": tf.RobertaConfig,
            "xlm-roberta": tf.XLMRobertaConfig,
            "camembert": tf.CamembertConfig,
        }[kind]
        return config_class(vocab_size=vocab, **SIZES, **positions, **ids, type_vocab_size=1)
    if kind == "distilbert":
        return tf.DistilBertConfig(
            vocab_size=vocab,
            dim=32,
            n_layers=2,
            n_heads=4,
            hidden_dim=64,
            pad_token_id=ids["pad_token_id"],
            **positions,
        )
    if kind == "albert":  # one shared layer applied twice; embeddings narrower than the hidden size
        return tf.AlbertConfig(vocab_size=vocab, embedding_size=16, **SIZES, **positions, **ids, hidden_act="gelu_new")
    if kind == "electra":
        return tf.ElectraConfig(vocab_size=vocab, embedding_size=16, **SIZES, **positions, **ids)
    if kind == "ernie":
        return tf.ErnieConfig(vocab_size=vocab, **SIZES, **positions, **ids, use_task_id=True)
    if kind == "deberta":  # as microsoft/deberta-base: relative attention c2p|p2c, no absolute positions
        return tf.DebertaConfig(
            vocab_size=vocab,
            **SIZES,
            **positions,
            **ids,
            relative_attention=True,
            pos_att_type=["c2p", "p2c"],
            position_biased_input=False,
            max_relative_positions=-1,
            type_vocab_size=0,
        )
    if kind in ("deberta-v2", "deberta-v2-tokens"):  # as microsoft/deberta-v3-base, with 4 log buckets (not 256)
        return tf.DebertaV2Config(
            vocab_size=vocab,
            **SIZES,
            **positions,
            **ids,
            relative_attention=True,
            pos_att_type=["p2c", "c2p"],
            position_biased_input=False,
            max_relative_positions=-1,
            position_buckets=4,
            norm_rel_ebd="layer_norm",
            share_att_key=True,
            type_vocab_size=0,
            num_labels=3,
        )
    if kind == "modernbert":  # layer 0 global, layer 1 local (|i - j| <= MODERNBERT_WINDOW)
        return tf.ModernBertConfig(
            vocab_size=vocab,
            **SIZES,
            **positions,
            **ids,
            cls_token_id=tokenizer.cls_token_id,
            sep_token_id=tokenizer.sep_token_id,
            layer_types=["full_attention", "sliding_attention"],
            local_attention=2 * MODERNBERT_WINDOW,
        )
    if kind == "mpnet":
        return tf.MPNetConfig(vocab_size=vocab, **SIZES, **positions, **ids)
    if kind == "roformer":
        return tf.RoFormerConfig(vocab_size=vocab, **SIZES, **positions, **ids)
    raise ValueError(f"no tiny config for {kind!r}")


def tiny_model(kind: str, tokenizer):
    """A random model of this kind (seed 0): masked LM or causal LM, or for the fine-tuned kinds a classification
    model."""
    import transformers as tf

    torch.manual_seed(0)
    config = tiny_config(kind, tokenizer)
    if kind == "llama-classifier":
        return tf.LlamaForSequenceClassification(config)
    if kind in (*ENCODER_DECODER_KINDS, *FOUND_ENCODER_DECODER_KINDS):
        return tf.AutoModelForSeq2SeqLM.from_config(config)
    if kind in (*DECODER_KINDS, *NO_ATTENTION_KINDS, *FOUND_LAYOUT_KINDS, *LOGIT_SCALE_KINDS):
        return tf.AutoModelForCausalLM.from_config(config)
    if kind in ENCODER_DECODER_KINDS:
        return tf.AutoModelForSeq2SeqLM.from_config(config)
    if kind == "bert-classifier":
        return tf.BertForSequenceClassification(config)
    if kind == "deberta-v2-tokens":
        return tf.DebertaV2ForTokenClassification(config)
    return tf.AutoModelForMaskedLM.from_config(config)


@cache
def _trained_bpe_json(special_tokens: tuple[str, ...]) -> str:
    """A byte-level BPE trained on the classroom set (as _bpe_vocabulary), these special tokens first, as JSON."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(_classroom_lines(), vocab_size=600, min_frequency=1, special_tokens=list(special_tokens))
    return bpe._tokenizer.to_str()


def decoder_tokenizer_for(kind: str):
    """The fast tokenizer a tiny decoder of this kind is saved with: byte-level BPE, this family's special tokens."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    if kind not in DECODER_SPECIALS:
        raise ValueError(f"no decoder tokenizer for {kind!r}")
    specials = DECODER_SPECIALS[kind]
    backend = Tokenizer.from_str(_trained_bpe_json(specials["vocabulary"]))
    backend.post_processor = processors.ByteLevel(trim_offsets=False)  # GPT-2's own: the offsets as they are
    # the BOS kinds as their real tokenizers: add_bos_token, which transformers turns into the TemplateProcessing
    # "<bos>:0 $A:0" (pairs "<bos>:0 $A:0 <bos>:1 $B:1"); saved in tokenizer.json, which a reload follows
    # (transformers 5 keeps add_bos_token itself out of tokenizer_config.json: reloaded, the attribute reads False)
    bos_kwargs = {} if specials["add_bos"] is None else dict(add_bos_token=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=specials["bos"],
        eos_token=specials["eos"],
        unk_token=specials["unk"],
        pad_token=specials["pad"],
        add_prefix_space=False,
        model_max_length=64,
        **bos_kwargs,
    )
    assert specials["add_bos"] in (None, specials["bos"]), f"{kind}: the token added first must be the BOS"
    assert len(tokenizer) == backend.get_vocab_size(), f"{kind}: a special token missing from the vocabulary"
    return tokenizer


def tiny_decoder_config(kind: str, tokenizer):
    """A 2-layer, hidden-32, 4-query-head decoder config of this kind (vocabulary and special ids from the tokenizer)."""
    import transformers as tf

    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    ids["pad_token_id"] = tokenizer.pad_token_id
    common = dict(vocab_size=len(tokenizer), max_position_embeddings=64, **ids)
    # the Llama-like families: grouped-query attention, head_dim 8, rotary
    gqa = dict(**SIZES, **common, num_key_value_heads=DECODER_KV_HEADS.get(kind), head_dim=8)
    if kind == "gpt2":
        return tf.GPT2Config(
            n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=64, vocab_size=len(tokenizer), **ids
        )
    if kind == "opt":  # learned positions, no rotary
        return tf.OPTConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32, **common
        )
    if kind == "gpt-neox":  # Pythia's rotary on a quarter of each head's 8 dimensions
        return tf.GPTNeoXConfig(**SIZES, **common, rotary_pct=0.25)
    if kind in ("llama", "llama-classifier"):
        return tf.LlamaConfig(**gqa, num_labels=2) if kind == "llama-classifier" else tf.LlamaConfig(**gqa)
    if kind == "qwen2":  # Qwen2's per-projection biases; no sliding window, as the released checkpoints
        return tf.Qwen2Config(**{k: v for k, v in gqa.items() if k != "head_dim"}, use_sliding_window=False)
    if kind == "qwen3":  # q/k RMS norms
        return tf.Qwen3Config(**gqa, use_sliding_window=False)
    if kind == "mistral":  # every layer slides
        return tf.MistralConfig(**gqa, sliding_window=DECODER_WINDOW)
    if kind == "phi3":  # fused qkv projection; head_dim = hidden / heads = 8
        phi3 = {k: v for k, v in gqa.items() if k != "head_dim"}
        return tf.Phi3Config(**phi3, original_max_position_embeddings=64, sliding_window=None)
    layers = dict(layer_types=["sliding_attention", "full_attention"], sliding_window=DECODER_WINDOW)
    if kind == "gemma":  # multi-query attention, as gemma-2b
        return tf.GemmaConfig(**gqa)
    if kind == "gemma2":  # logit soft-capping at Gemma 2's own values; scores scaled by head_dim ** -0.5
        return tf.Gemma2Config(
            **gqa, **layers, query_pre_attn_scalar=8, attn_logit_softcapping=50.0, final_logit_softcapping=30.0
        )
    if kind == "gemma3":  # the text model (model_type gemma3_text); q/k norms, local and global rotary bases
        return tf.Gemma3TextConfig(**gqa, **layers, query_pre_attn_scalar=8)
    raise ValueError(f"no tiny decoder config for {kind!r}")


@cache
def _trained_unigram_json(special_tokens: tuple[str, ...], unk: str) -> str:
    """A SentencePiece-style Unigram trained on the classroom set, these special tokens first, as JSON."""
    from tokenizers import SentencePieceUnigramTokenizer

    unigram = SentencePieceUnigramTokenizer()
    unigram.train_from_iterator(
        _classroom_lines(), vocab_size=400, special_tokens=list(special_tokens), unk_token=unk, show_progress=False
    )
    return unigram._tokenizer.to_str()


def unigram_tokenizer(kind: str):
    """T5's or Marian's fast tokenizer: a Unigram with a metaspace pre-tokenizer that appends its eos to every text."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    specials = UNIGRAM_SPECIALS[kind]
    backend = Tokenizer.from_str(_trained_unigram_json(specials["vocabulary"], specials["unk"]))
    eos = specials["eos"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A $B {eos}", special_tokens=[(eos, backend.token_to_id(eos))]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=eos,
        unk_token=specials["unk"],
        pad_token=specials["pad"],
        model_max_length=64,
    )
    assert len(tokenizer) == backend.get_vocab_size(), f"{kind}: a special token missing from the vocabulary"
    return tokenizer


def tiny_encoder_decoder_config(kind: str, tokenizer):
    """A 2+2-layer, 4-head, hidden-32 encoder-decoder config of this kind; the decoder starts from the family's own
    token (T5 and Marian: pad; BART: </s>)."""
    import transformers as tf

    ids = dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if kind == "t5":
        return tf.T5Config(
            **ids, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=tokenizer.pad_token_id,
            relative_attention_num_buckets=8, relative_attention_max_distance=16,
        )  # fmt: skip
    sizes = dict(
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
    )
    if kind == "bart":
        return tf.BartConfig(
            **ids, **sizes, bos_token_id=tokenizer.bos_token_id, decoder_start_token_id=tokenizer.eos_token_id,
            forced_eos_token_id=tokenizer.eos_token_id,
        )  # fmt: skip
    if kind == "marian":
        return tf.MarianConfig(**ids, **sizes, decoder_start_token_id=tokenizer.pad_token_id, forced_eos_token_id=None)
    raise ValueError(f"no tiny encoder-decoder config for {kind!r}")


def tiny_found_layout_config(kind: str, tokenizer):
    """A 2-layer, 4-head, hidden-32 config of a family outside the library's list (FOUND_LAYOUT_KINDS)."""
    import transformers as tf

    ids = dict(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    common = dict(vocab_size=len(tokenizer), **ids)
    llama = dict(**SIZES, **common, max_position_embeddings=64, num_key_value_heads=2)
    if kind == "mixtral":  # a mixture of 4 experts, 2 chosen per token
        return tf.MixtralConfig(**llama, num_local_experts=4, num_experts_per_tok=2, sliding_window=None)
    if kind == "qwen2-moe":  # 4 routed experts and a shared one; biases on q, k, v
        return tf.Qwen2MoeConfig(
            **llama, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
            use_sliding_window=False,
        )  # fmt: skip
    if kind == "stablelm":  # LayerNorm, rotary on a quarter of each head's 8 dimensions, attention and MLP in parallel
        return tf.StableLmConfig(**llama, partial_rotary_factor=0.25, use_parallel_residual=True)
    if kind == "phi":  # Phi-2: rotary on half of each head, parallel residual, the output projection named dense
        return tf.PhiConfig(**SIZES, **common, max_position_embeddings=64, partial_rotary_factor=0.5)
    if kind == "gpt-bigcode":  # GPT-2's paths, one fused c_attn with a single key and value head (multi-query)
        return tf.GPTBigCodeConfig(
            n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=64, multi_query=True, **common
        )
    if kind == "falcon":  # fused query_key_value with one key/value head, rotary, attention and MLP in parallel
        return tf.FalconConfig(**{k: v for k, v in SIZES.items() if k != "intermediate_size"}, **common,
                               multi_query=True, parallel_attn=True, alibi=False, new_decoder_architecture=False)  # fmt: skip
    if kind == "bloom":  # per-head fused query_key_value, ALiBi
        return tf.BloomConfig(hidden_size=32, n_layer=2, n_head=4, **common)
    if kind == "cohere":  # LayerNorm without bias, attention and MLP in parallel, logits times logit_scale
        return tf.CohereConfig(**llama, logit_scale=0.5)
    if kind == "gptj":  # rotary on 4 of each head's 8 dimensions (every two), attention and MLP in parallel
        return tf.GPTJConfig(n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=64, rotary_dim=4, **common)
    ids = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    if kind == "mt5":
        return tf.MT5Config(
            **ids, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=tokenizer.pad_token_id,
            relative_attention_num_buckets=8, relative_attention_max_distance=16,
        )  # fmt: skip
    if kind == "mbart":  # pre-LN (unlike BART), a LayerNorm after each stack
        return tf.MBartConfig(
            **ids, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
            bos_token_id=tokenizer.bos_token_id, decoder_start_token_id=tokenizer.eos_token_id,
        )  # fmt: skip
    raise ValueError(f"no tiny config for {kind!r}")


def tiny_no_attention_config(kind: str, tokenizer):
    """A 2-layer, hidden-32 causal LM without attention: Mamba (a state-space model) or RWKV (a recurrent one)."""
    import transformers as tf

    ids = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    if kind == "mamba":
        return tf.MambaConfig(**ids, hidden_size=32, num_hidden_layers=2, state_size=4)
    if kind == "rwkv":
        return tf.RwkvConfig(
            **ids,
            hidden_size=32,
            num_hidden_layers=2,
            attention_hidden_size=32,
            intermediate_size=64,
            context_length=64,
        )
    raise ValueError(f"no tiny config without attention for {kind!r}")


def move_off_initial(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """Every bias, and every norm's weight, moved off its initial value (0, 1) at random, so that a misplaced bias or
    gamma changes what a test compares; the model."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            moved = [getattr(module, "bias", None)]
            if "norm" in type(module).__name__.lower():
                moved.append(getattr(module, "weight", None))
            for parameter in moved:
                if isinstance(parameter, torch.nn.Parameter):
                    parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model


def save_tiny(kind: str, folder: Path) -> Path:
    """Write a tiny random model of this kind and its tokenizer to folder; the folder."""
    tokenizer = tokenizer_for(kind)
    model = tiny_model(kind, tokenizer)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_config_with_vocab(kind: str, vocab_size: int):
    """tiny_config's config of this kind with another vocabulary size."""
    config = tiny_config(kind, tokenizer_for(kind))
    config.vocab_size = vocab_size
    return config


def save_tiny_bert(folder, layers: int, seed: int):
    """A tiny random BERT of `layers` layers saved to a folder (the comparison's second model)."""
    from transformers import AutoModelForMaskedLM

    tokenizer = bert_tokenizer()
    tokenizer.model_max_length = 64
    config = tiny_config_with_vocab("bert", len(tokenizer))
    config.num_hidden_layers = layers
    torch.manual_seed(seed)
    AutoModelForMaskedLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
