"""The speculation types llama-server knows, by family (pure data; neutral, so every layer may read it).

``--spec-type`` takes one of these, or a comma list of them (a chain such as ``ngram-mod,draft-simple``);
``none`` and ``draft-mtp`` (the target's own multi-token-prediction layers) belong to neither family. The
sweep's default subset of the n-gram types is ``tuner.calibration.candidates.SWEEP_NGRAM_TYPES``.
"""

from __future__ import annotations

#: Speculation types that need a separate draft GGUF (``-md``); common/speculative.cpp
#: ``common_speculative_init`` builds them only when a draft context exists.
DRAFT_MODEL_TYPES = frozenset({"draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"})
#: n-gram speculation types: no draft model, no extra memory (common/speculative.cpp).
NGRAM_TYPES = frozenset({"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"})

__all__ = ["DRAFT_MODEL_TYPES", "NGRAM_TYPES"]
