"""Matching: a request in a caller's own words to the 1-3 registered tools that fit, or none.

analysis    text to weighted terms (words, CJK words/bigrams/characters, pinyin, concepts)
lexical     BM25F presences and the share of a request a tool explains (compiled twin)
semantic    the multilingual sentence embedding (the multilingual Universal Sentence Encoder v3)
vocabulary  optional product knowledge: concepts joined on top of the words
calibrate   the per-registry calibration, from pseudo-requests made of the tools' own texts
index       the immutable index, the evidence per candidate and the found decision
evaluate    hit@1 / hit@3 / none_acc / mrr over a labelled query file
"""

from bitong.agent.matching.index import (
    DEFAULT_THRESHOLD,
    SUGGESTION,
    Calibration,
    Hit,
    Index,
    MatchResult,
    ToolAnalysis,
    analysis_fingerprint,
    analyze,
)
from bitong.agent.matching.vocabulary import Vocabulary, VocabularyError, default_vocabulary, load_vocabulary

__all__ = ["DEFAULT_THRESHOLD", "SUGGESTION", "Calibration", "Hit", "Index", "MatchResult", "ToolAnalysis",
           "Vocabulary", "VocabularyError", "analysis_fingerprint", "analyze", "default_vocabulary",
           "load_vocabulary"]
