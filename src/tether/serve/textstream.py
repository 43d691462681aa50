"""Generated token ids -> text, one token at a time: stop sequences and safe streaming deltas.

Streamed and non-streamed answers are the same text by construction: the final text is
always the concatenation of the deltas. A delta never contains text that could still turn
out to be the start of a stop sequence, nor a half-decoded character (U+FFFD).
"""

from __future__ import annotations

from collections.abc import Sequence

REPLACEMENT = "\ufffd"


class TextAssembler:
    """Accumulates one sequence's token ids (EOS excluded) and releases text safely."""

    def __init__(self, tokenizer, stop: Sequence[str] = (), incremental: bool = True):
        self.tokenizer = tokenizer
        self.stop = tuple(s for s in stop if s)
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        # Without stop sequences nor a streaming reader the text is needed only at the end.
        self.incremental = incremental or bool(self.stop)
        self.ids: list[int] = []
        self.sent = ""
        self.stopped = False

    def _decode(self) -> str:
        return self.tokenizer.decode(self.ids, skip_special_tokens=True)

    def add(self, token_id: int) -> str:
        """Append a token; return the newly releasable text. Sets ``stopped`` on a stop sequence."""
        self.ids.append(int(token_id))
        if not self.incremental:
            return ""
        text = self._decode()
        if not text.startswith(self.sent):
            return ""  # the decoder revised earlier text (rare): wait until it settles
        start = len(self.sent)
        if self.stop:
            hits = [i for i in (text.find(s, start) for s in self.stop) if i >= 0]
            if hits:
                self.stopped = True
                return self._release(text[: min(hits)])
        safe = text[: max(start, len(text) - self.hold)].rstrip(REPLACEMENT)
        return self._release(safe) if len(safe) > start else ""

    def finish(self) -> str:
        """Release everything still held (generation ended without a stop sequence)."""
        if self.stopped:
            return ""
        text = self._decode()
        return self._release(text) if text.startswith(self.sent) else ""

    def _release(self, upto: str) -> str:
        delta = upto[len(self.sent):]
        self.sent = upto
        return delta

    @property
    def text(self) -> str:
        return self.sent
