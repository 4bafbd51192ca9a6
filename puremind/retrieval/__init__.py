"""Retrieval: lexical (FTS5 BM25), dense, fusion (RRF), rerank, and the pipeline that joins them."""
