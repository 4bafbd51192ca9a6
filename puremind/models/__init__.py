"""The model layer: small Protocols the rest of pureMind depends on, and the loaders behind them.

Importing this package loads neither onnxruntime nor torch; `puremind.models.loader` reaches for them only when
a model is actually used.
"""

from puremind.models.base import Embedder, ModelsUnavailable, Reranker, SemanticOff

__all__ = ["Embedder", "ModelsUnavailable", "Reranker", "SemanticOff"]
