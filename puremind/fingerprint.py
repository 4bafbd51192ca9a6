"""Embedding fingerprints: the identity of the vectors an embedder makes, and the error for an index whose vectors
another embedder made. Pure string functions, shared by the store (which keeps the fingerprint beside the vectors
and checks it) and the model layer (which makes it).

A fingerprint reads `org/name@revision|pool=...|norm=...|q=...|p=...|max=...`; the precision (fp32, fp16, int8)
is not part of it: those embed into the same space (cosine 0.998 measured) and are recorded apart.
"""

from __future__ import annotations

from puremind.errors import FingerprintMismatch


def vector_identity(fingerprint: str) -> str:
    """The part of an embedding fingerprint that must match for vectors to be compared.

    Fingerprints written before the precision was left out carry the ONNX variant as their second field
    (`hub@rev|int8|pool=...`); it is dropped, so those indexes keep answering without a rebuild.
    """
    parts = fingerprint.split("|")
    if len(parts) >= 3 and "@" in parts[0] and "=" not in parts[1] and parts[2].startswith("pool="):
        del parts[1]
    return "|".join(parts)


def same_vectors(stored: str | None, fingerprint: str | None) -> bool:
    """Whether vectors fingerprinted `stored` and `fingerprint` live in the same space (None matches nothing)."""
    return stored is not None and fingerprint is not None and vector_identity(stored) == vector_identity(fingerprint)


def model_label(fp: str) -> str:
    """The model a fingerprint names, for messages: "org/name@0123456789ab" (the revision cut to 12)."""
    head = fp.split("|", 1)[0]
    name, at, revision = head.rpartition("@")
    if not at:
        return head
    return f"{name}@{revision[:12]}" if len(revision) == 40 else head


def _field_changes(stored: str, configured: str) -> list[str]:
    """The key=value fields that differ between two fingerprints of one model, e.g. ["pooling mean -> cls"]."""
    def fields(fp: str) -> dict[str, str]:
        return dict(part.split("=", 1) for part in vector_identity(fp).split("|")[1:] if "=" in part)

    old, new = fields(stored), fields(configured)
    names = {"pool": "pooling", "norm": "normalisation", "q": "query prefix", "p": "passage prefix",
             "max": "max tokens"}
    return [f"{names.get(k, k)} {old.get(k)} -> {new.get(k)}" for k in dict.fromkeys([*old, *new])
            if old.get(k) != new.get(k)]


def index_mismatch(stored: str, configured: str, *, doing: str) -> FingerprintMismatch:
    """The error for an index whose vectors were made by another embedder (or other settings): both named."""
    was, now = model_label(stored), model_label(configured)
    if was != now:
        what = f"this index holds vectors of {was}, but the configured embedder is {now}"
        back = f"or set [models] embedder back to {was.rsplit('@', 1)[0]}"
    else:
        changes = ", ".join(_field_changes(stored, configured)) or "settings"
        what = f"the embedder settings changed since this index was built with {was} ({changes})"
        back = "or set them back"
    return FingerprintMismatch(f"{what}: {doing}", hint=f"run `puremind index --rebuild` to embed every note with {now}, {back}")
