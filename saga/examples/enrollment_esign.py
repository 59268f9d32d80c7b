"""
The enrollment's e-signature provider: the port it needs, and a sandbox of it.

:class:`SignatureProvider` is what :mod:`saga.examples.enrollment` asks of an
e-signature service; :class:`SandboxSignatures` keeps its envelopes as files
in a folder derived from the engine's database (:func:`sandbox_for`), so
that every process of one engine sees the same ones.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from saga import OutcomeUnknown


@dataclass(frozen=True)
class Envelope:
    """A contract at the e-signature provider."""

    id: str
    key: str
    signer: str
    status: str  # sent, completed, declined, voided


class SignatureProvider(Protocol):
    """What the enrollment needs from an e-signature service; keys make calls idempotent."""

    def send(self, *, key: str, signer: str) -> Envelope:
        """Send a contract under ``key``; the same key again returns the same envelope."""

    def status(self, *, key: str) -> Envelope | None:
        """The envelope sent under ``key``, if any."""

    def void(self, *, key: str) -> Envelope | None:
        """Void the envelope under ``key`` unless it was signed."""


class SandboxSignatures:
    """
    A sandbox e-signature service keeping its envelopes as files in a folder.

    Signers whose name starts with ``timeout-`` make the send time out after
    the envelope exists; ``down-``, before anything happened.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.folder / f"{key.replace(':', '_')}.json"

    def _write(self, envelope: Envelope) -> None:
        scratch = self.folder / f".{uuid.uuid4().hex}"
        scratch.write_text(json.dumps(asdict(envelope)))
        scratch.replace(self._path(envelope.key))  # atomic: readers see one or the other

    def send(self, *, key: str, signer: str) -> Envelope:
        """The send: an envelope per key; the ``timeout-`` and ``down-`` signers fail."""
        if signer.startswith("down-"):
            raise OutcomeUnknown("esign sandbox: the send timed out before anything happened")
        existing = self.status(key=key)
        if existing is None:
            existing = Envelope(f"env_{uuid.uuid4().hex[:12]}", key, signer, "sent")
            self._write(existing)
            if signer.startswith("timeout-"):
                raise OutcomeUnknown("esign sandbox: the send timed out after the envelope left")
        return existing

    def status(self, *, key: str) -> Envelope | None:
        """The envelope kept under ``key``, if any."""
        path = self._path(key)
        return Envelope(**json.loads(path.read_text())) if path.exists() else None

    def void(self, *, key: str) -> Envelope | None:
        """The envelope under ``key`` voided, unless it was signed or declined."""
        envelope = self.status(key=key)
        if envelope is None or envelope.status != "sent":
            return envelope
        voided = Envelope(envelope.id, key, envelope.signer, "voided")
        self._write(voided)
        return voided

    def sign(self, *, key: str, outcome: str = "completed") -> Envelope:
        """The signer acts (a test's hand on the sandbox): completed or declined."""
        envelope = self.status(key=key)
        if envelope is None or envelope.status != "sent":
            msg = f"no envelope waiting for a signature under {key!r}"
            raise LookupError(msg)
        signed = Envelope(envelope.id, key, envelope.signer, outcome)
        self._write(signed)
        return signed


def sandbox_for(ctx: Any) -> SandboxSignatures:
    """The sandbox's folder, derived from the engine's database (the same in every process)."""
    url = ctx.db.url
    if ctx.db.dialect == "sqlite":
        return SandboxSignatures(Path(f"{url.database}.esign"))
    where = ctx.db.search_path_schema or url.database
    return SandboxSignatures(Path(tempfile.gettempdir()) / f"saga-esign-{where}")
