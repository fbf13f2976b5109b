"""The one table of the names a reader sees for the token classes (METHODS §1) and the attention statistics: in the
figures (views), the tables, the report and the tour (present) and the pages."""

from __future__ import annotations

CLASS_NAMES = {"cls": "[CLS]", "sep": "[SEP]", "punct": "punctuation", "other": "other"}  # a legend's classes
TOKEN_NAMES = {  # what each statistic is of, in a sentence or a plot's title
    **CLASS_NAMES,
    "other": "other tokens",
    "prev": "previous token",
    "self": "the token itself",
    "next": "next token",
    "sep_to_sep": "[SEP] rows to [SEP]",
    "rest_to_sep": "other rows to [SEP]",
    "entropy": "entropy",
    "cls_entropy": "[CLS]-row entropy",
}
STAT_NAMES = {  # a table's columns
    **{key: f"{CLASS_NAMES[key]} share" for key in ("cls", "sep", "punct")},
    "other": "other-token share",
    "prev": "previous-token share",
    "self": "own-token share",
    "next": "next-token share",
    "sep_to_sep": TOKEN_NAMES["sep_to_sep"],
    "rest_to_sep": TOKEN_NAMES["rest_to_sep"],
    "entropy": f"{TOKEN_NAMES['entropy']} (nats)",
    "cls_entropy": f"{TOKEN_NAMES['cls_entropy']} (nats)",
}
NORM_NAMES = {
    **{key: f"{STAT_NAMES[key].removesuffix(' share')} norm share" for key in ("cls", "sep", "punct", "other")},
    **{
        f"value_{key}": f"{STAT_NAMES[key].removesuffix(' share')} value norm"
        for key in ("cls", "sep", "punct", "other")
    },
}
SHARE_KEYS = ("cls", "sep", "punct", "other", "prev", "self", "next", "sep_to_sep", "rest_to_sep")  # fractions of 1
