"""The model layer: small Protocols the rest of pureMind depends on, and the loaders behind them."""

from puremind.models.base import Embedder, Reranker, load_embedder

__all__ = ["Embedder", "Reranker", "load_embedder"]
