"""The names the tables, figures and the report give the statistics of attnlib's analyses."""

from __future__ import annotations

STAT_NAMES = {
    "cls": "[CLS] share",
    "sep": "[SEP] share",
    "punct": "punctuation share",
    "other": "other-token share",
    "prev": "previous-token share",
    "self": "own-token share",
    "next": "next-token share",
    "sep_to_sep": "[SEP] rows to [SEP]",
    "rest_to_sep": "other rows to [SEP]",
    "entropy": "entropy (nats)",
    "cls_entropy": "[CLS]-row entropy (nats)",
}
NORM_NAMES = {
    **{key: f"{STAT_NAMES[key].removesuffix(' share')} norm share" for key in ("cls", "sep", "punct", "other")},
    **{
        f"value_{key}": f"{STAT_NAMES[key].removesuffix(' share')} value norm"
        for key in ("cls", "sep", "punct", "other")
    },
}
SHARE_KEYS = ("cls", "sep", "punct", "other", "prev", "self", "next", "sep_to_sep", "rest_to_sep")  # fractions of 1
