"""Synthetic tasks for the tiny transformer, generated in code (no downloads), seeded.

Every task asks "which other token should this position copy?": the target at a scored position
is made of tokens found somewhere in the input, and ``TaskData.source_pos`` says where. That
makes each task a set of *relations* (previous token, matching key, subject of the verb, ...)
whose use by a head can be measured: the attention mass a head puts on ``source_pos``.

Tasks (``get_task(name)``):

* ``reverse`` / ``copy`` / ``sort``: ``3 1 4 1 | _ _ _ _`` -> the blanks become ``1 4 1 3`` /
  ``3 1 4 1`` / ``1 1 3 4``.
* ``two_relations``: items like ``c5`` (key ``c``, value ``5``); each item answers ``p/q``: the
  value of the item just before it (relation "previous token", found by position) and the value
  of the item whose key is the next letter (relation "next letter", found by content), both at once.
* ``grammar``: sentences like ``yesterday the bank approved a new loan .``; the subject must name
  its object (bank -> loan), the verb its subject (approved -> bank), the time word its verb
  (yesterday -> approved).
* ``recent_digit`` (causal, any length): ``<s> a 7 c d e 2`` -> ``. - 7 7 7 - 2``: each token
  answers the most recent digit among the last 3 tokens, or ``-``; a rule about *recent* tokens
  only, so it holds at every length (chapter 16 trains short and tests long).
* ``recall`` (causal): ``a 3 f 7 c 1 | f c a`` -> the query keys answer ``7 1 3``: each stored pair may be
  asked for, found by content (chapter 18 sets fixed-size linear-attention states against full attention).
* ``translate`` (encoder-decoder): ``c a f b`` -> ``B F A C`` (reverse and capitalise, variable
  length, padded): the decoder must find, through cross-attention, the source word it translates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..validation import require_positive_int

IGNORE = -100  # target of an unscored position (torch's cross_entropy ignore_index)


@dataclass
class TaskData:
    """A batch of examples. N examples, T positions (S source positions for encoder-decoder tasks).

    Attributes:
        inputs: (N, T) long token ids (the decoder input for encoder-decoder tasks).
        targets: (N, T) long token ids to predict, ``IGNORE`` (-100) where nothing is scored.
        source_pos: (N, T, R) long: for each of the task's R relations, the position (in ``inputs``,
            or in ``source`` for encoder-decoder tasks) that relation points to from position t, or
            -1 where relation r is not scored at t. A position can carry several relations at once.
        source: (N, S) long source tokens, encoder-decoder tasks only.
        source_lengths: (N,) long number of real source tokens, encoder-decoder tasks only.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    source_pos: torch.Tensor
    source: torch.Tensor | None = None
    source_lengths: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.inputs.shape[0]


class Task:
    """Base class: a vocabulary, the relations scored, and a seeded ``sample`` method."""

    name = "task"
    description = ""
    encoder_decoder = False

    def __init__(self):
        self.vocab: list[str] = []
        self.relation_names: tuple[str, ...] = ()
        self.seq_len = 0  # T
        self.source_len = 0  # S (encoder-decoder only)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def sample(self, n: int, seed: int | torch.Generator = 0) -> TaskData:
        """Draw n examples. ``seed`` is an int (same int, same examples) or a torch.Generator."""
        require_positive_int(n, "n")
        generator = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(int(seed))
        return self._sample(n, generator)

    def _sample(self, n: int, generator: torch.Generator) -> TaskData:
        raise NotImplementedError

    def relation_correct(self, predictions: torch.Tensor, data: TaskData) -> torch.Tensor:
        """Which relations each prediction got right: (N, T) ids -> (N, T, R) bool.

        By default a relation is right when the whole predicted token is; tasks whose answer
        token combines several relations override this to score each part separately.
        """
        return (predictions == data.targets)[..., None].expand(-1, -1, len(self.relation_names))

    def decode(self, ids) -> list[str]:
        """Token ids (T,) -> their strings; ``IGNORE`` becomes '.'."""
        return [self.vocab[i] if i >= 0 else "." for i in torch.as_tensor(ids).tolist()]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, vocab_size={self.vocab_size}, seq_len={self.seq_len})"


class SequenceTask(Task):
    """``copy``, ``reverse`` or ``sort`` n digits: ``x_0 .. x_{n-1} | _ .. _`` -> op(x) at the blanks."""

    def __init__(self, op: str = "reverse", length: int = 8, num_symbols: int = 10):
        super().__init__()
        if op not in ("copy", "reverse", "sort"):
            raise ValueError(f"op must be 'copy', 'reverse' or 'sort', got {op!r}")
        if length < 1 or not 1 <= num_symbols <= 26:
            raise ValueError(f"need length >= 1 and 1 <= num_symbols <= 26, got {length}, {num_symbols}")
        self.name = op
        self.op, self.length, self.num_symbols = op, length, num_symbols
        self.description = f"{op} {length} symbols: answer slots after '|' copy the right input"
        self.vocab = [str(i) if num_symbols <= 10 else chr(ord("a") + i) for i in range(num_symbols)] + ["|", "_"]
        self.sep, self.blank = num_symbols, num_symbols + 1
        self.relation_names = (op,)
        self.seq_len = 2 * length + 1

    def _sample(self, n, generator):
        L = self.length
        x = torch.randint(self.num_symbols, (n, L), generator=generator)  # (N, L)
        if self.op == "copy":
            where = torch.arange(L).expand(n, L)  # (N, L)
        elif self.op == "reverse":
            where = torch.arange(L - 1, -1, -1).expand(n, L)  # (N, L)
        else:
            where = torch.sort(x, dim=1, stable=True).indices  # (N, L): where the j-th smallest sits
        answer = torch.gather(x, 1, where)  # (N, L)
        inputs = torch.cat([x, torch.full((n, 1), self.sep), torch.full((n, L), self.blank)], dim=1)  # (N, T)
        unscored = torch.full((n, L + 1), IGNORE)
        targets = torch.cat([unscored, answer], dim=1)  # (N, T)
        source_pos = torch.cat([torch.full((n, L + 1), -1), where], dim=1)[..., None]  # (N, T, 1)
        return TaskData(inputs, targets, source_pos)


class TwoRelationsTask(Task):
    """Items ``key+value`` (``c5``); each item must report two values at once, found two ways.

    Every key letter appears once (the items are a shuffled alphabet). The item at position t
    answers ``p/q`` where p is the value of the item just before it (relation "previous token",
    found by *position*) and q is the value of the item whose key is the next letter, ``c`` ->
    ``d``, wrapping ``h`` -> ``a`` (relation "next letter", found by *content*, wherever it sits).
    One softmax can put its weight on one place, so a single head cannot fetch both cleanly;
    two heads can, one per relation. Each relation is scored on its own part of the answer.
    """

    name = "two_relations"

    def __init__(self, num_keys: int = 8, num_values: int = 8):
        super().__init__()
        if not 2 <= num_keys <= 26 or not 2 <= num_values <= 10:
            raise ValueError(f"need 2 <= num_keys <= 26 and 2 <= num_values <= 10, got {num_keys}, {num_values}")
        self.num_keys, self.num_values = num_keys, num_values
        letters = [chr(ord("a") + k) for k in range(num_keys)]
        self.items = num_keys * num_values  # ids [0, K*V) are items, [K*V, K*V + V*V) answers
        self.vocab = [f"{k}{v}" for k in letters for v in range(num_values)]
        self.vocab += [f"{p}/{q}" for p in range(num_values) for q in range(num_values)]
        self.relation_names = ("previous token", "next letter")
        self.seq_len = num_keys
        self.description = (
            "items like 'c5': each answers 'p/q', p = value of the item before it, "
            "q = value of the item with the next letter"
        )

    def _sample(self, n, generator):
        K, V = self.num_keys, self.num_values
        keys = torch.rand(n, K, generator=generator).argsort(dim=1)  # (N, T): a shuffled alphabet
        values = torch.randint(V, (n, K), generator=generator)  # (N, T)
        inputs = keys * V + values  # (N, T) item ids
        where_key = keys.argsort(dim=1)  # (N, K): position of each key letter
        next_pos = torch.gather(where_key, 1, (keys + 1) % K)  # (N, T): where the next letter sits
        prev_pos = torch.arange(-1, K - 1).expand(n, K)  # (N, T)
        prev_value = torch.gather(values, 1, prev_pos.clamp(min=0))  # (N, T)
        next_value = torch.gather(values, 1, next_pos)  # (N, T)
        targets = self.items + prev_value * V + next_value  # (N, T) answer ids
        targets[:, 0] = IGNORE  # the first item has no previous item
        source_pos = torch.stack([prev_pos, next_pos], dim=-1).clone()  # (N, T, 2)
        source_pos[:, 0] = -1
        return TaskData(inputs, targets, source_pos)

    def relation_correct(self, predictions, data):
        """Score the two halves of the answer ``p/q`` separately: (N, T) -> (N, T, 2) bool."""
        V = self.num_values
        guess = predictions - self.items  # (N, T); negative when an item id was predicted
        truth = data.targets - self.items
        valid = guess >= 0
        prev_right = valid & (guess // V == truth // V)
        next_right = valid & (guess % V == truth % V)
        return torch.stack([prev_right, next_right], dim=-1)  # (N, T, 2)


class GrammarTask(Task):
    """Tiny sentences: ``[time] det [adj] SUBJECT VERB det [adj] OBJECT [time] .`` padded to T.

    Relations (after a popular picture of multi-head attention): the subject names its object
    (bank -> loan), the verb names its subject (approved -> bank), the time word names the verb
    (yesterday -> approved). Subject and object come from the same nouns, so only the sentence's
    structure tells which is which.
    """

    name = "grammar"
    NOUNS = ("bank", "loan", "client", "manager", "firm", "report", "clerk", "contract")
    VERBS = ("approved", "signed", "rejected", "reviewed", "funded", "audited")
    TIMES = ("yesterday", "today", "monday", "friday", "recently")
    ADJECTIVES = ("big", "new", "small", "old", "local")
    DETERMINERS = ("the", "a")

    def __init__(self):
        super().__init__()
        self.vocab = ["<pad>", "."] + list(self.DETERMINERS + self.ADJECTIVES + self.NOUNS + self.VERBS + self.TIMES)
        self.index = {word: i for i, word in enumerate(self.vocab)}
        self.relation_names = ("subject -> object", "verb -> subject", "time -> verb")
        self.seq_len = 9
        self.description = "'the bank approved the loan yesterday .': subject->object, verb->subject, time->verb"

    def _pick(self, words, generator, n):
        return [words[i] for i in torch.randint(len(words), (n,), generator=generator).tolist()]

    def _sample(self, n, generator):
        T = self.seq_len
        inputs = torch.zeros(n, T, dtype=torch.long)  # <pad> = 0
        targets = torch.full((n, T), IGNORE)
        source_pos = torch.full((n, T, 3), -1)
        coin = torch.rand(n, 4, generator=generator).tolist()  # time first?, adj on subj?, adj on obj?, spare
        det = self._pick(self.DETERMINERS, generator, 2 * n)
        adj = self._pick(self.ADJECTIVES, generator, 2 * n)
        verb = self._pick(self.VERBS, generator, n)
        time = self._pick(self.TIMES, generator, n)
        pair = torch.rand(n, len(self.NOUNS), generator=generator).argsort(dim=1)[:, :2].tolist()  # distinct nouns
        for b in range(n):
            words, roles = [], {}
            if coin[b][0] < 0.5:
                roles["time"] = len(words)
                words.append(time[b])
            words.append(det[2 * b])
            if coin[b][1] < 0.5:
                words.append(adj[2 * b])
            roles["subject"] = len(words)
            words.append(self.NOUNS[pair[b][0]])
            roles["verb"] = len(words)
            words.append(verb[b])
            words.append(det[2 * b + 1])
            if coin[b][2] < 0.5:
                words.append(adj[2 * b + 1])
            roles["object"] = len(words)
            words.append(self.NOUNS[pair[b][1]])
            if "time" not in roles:
                roles["time"] = len(words)
                words.append(time[b])
            words.append(".")
            inputs[b, : len(words)] = torch.tensor([self.index[w] for w in words])
            for r, (at, to) in enumerate((("subject", "object"), ("verb", "subject"), ("time", "verb"))):
                source_pos[b, roles[at], r] = roles[to]
                targets[b, roles[at]] = inputs[b, roles[to]]
        return TaskData(inputs, targets, source_pos)


class TranslateTask(Task):
    """Encoder-decoder toy translation: ``c a f b`` -> ``B F A C`` (reverse and capitalise).

    Sources have between ``min_len`` and ``max_len`` words, padded with ``<pad>``; the decoder
    reads ``<s>`` and the target so far (teacher forcing) and predicts the next target word. The
    target word t translates source word ``length - 1 - t``: that is the alignment that a
    cross-attention head should find. Source and target share one vocabulary (for simplicity).
    """

    name = "translate"
    encoder_decoder = True

    def __init__(self, min_len: int = 4, max_len: int = 8, num_words: int = 10):
        super().__init__()
        if not 1 <= min_len <= max_len or not 1 <= num_words <= 26:
            raise ValueError(
                f"need 1 <= min_len <= max_len and 1 <= num_words <= 26, got {min_len}, {max_len}, {num_words}"
            )
        self.min_len, self.max_len, self.num_words = min_len, max_len, num_words
        lower = [chr(ord("a") + i) for i in range(num_words)]
        self.vocab = ["<pad>", "<s>"] + lower + [w.upper() for w in lower]
        self.pad, self.bos = 0, 1
        self.relation_names = ("aligned source word",)
        self.seq_len = max_len  # T (decoder)
        self.source_len = max_len  # S (encoder)
        self.description = "translate 'c a f b' -> 'B F A C' (reverse, capitalise) with an encoder-decoder"

    def _sample(self, n, generator):
        S, W = self.max_len, self.num_words
        lengths = torch.randint(self.min_len, S + 1, (n,), generator=generator)  # (N,)
        words = torch.randint(W, (n, S), generator=generator)  # (N, S)
        real = torch.arange(S)[None, :] < lengths[:, None]  # (N, S)
        source = torch.where(real, 2 + words, self.pad)  # (N, S)
        aligned = (lengths[:, None] - 1 - torch.arange(S)[None, :]).clamp(min=0)  # (N, T): source index per target
        translated = 2 + W + torch.gather(words, 1, aligned)  # (N, T) capitalised
        targets = torch.where(real, translated, IGNORE)  # (N, T)
        inputs = torch.cat([torch.full((n, 1), self.bos), torch.where(real, translated, self.pad)[:, :-1]], dim=1)
        source_pos = torch.where(real, aligned, -1)[..., None]  # (N, T, 1)
        return TaskData(inputs, targets, source_pos, source=source, source_lengths=lengths)


class RecentDigitTask(Task):
    """Causal: ``<s>`` then a stream of digits and letters; each position answers the most recent
    digit among the last ``window`` tokens (itself included), or ``-`` when there is none.

    Letters are noise that is never the answer, and about half the positions have no digit near
    them, so an attention head that looks for digits often finds nothing to look at: the task
    invites the "attention sink" of chapter 16 (a head parks its weight on ``<s>``). ``source_pos``
    points at the digit, or at ``<s>`` (position 0) for ``-``. The rule reads only recent tokens,
    so it holds at every length: train on ``length`` tokens, test on longer ones with
    :meth:`sample_length`. Position 0 (``<s>``) is unscored.
    """

    name = "recent_digit"

    def __init__(self, length: int = 16, window: int = 3, digit_rate: float = 0.2):
        super().__init__()
        if length < 1 or window < 1 or not 0.0 < digit_rate <= 1.0:
            raise ValueError(
                f"need length >= 1, window >= 1 and 0 < digit_rate <= 1, got {length}, {window}, {digit_rate}"
            )
        self.length, self.window, self.digit_rate = length, window, digit_rate
        self.vocab = [str(i) for i in range(10)] + [chr(ord("a") + i) for i in range(10)] + ["-", "<s>"]
        self.none, self.bos = 20, 21
        self.relation_names = (f"digit in last {window}",)
        self.seq_len = length + 1
        self.description = f"causal: each token answers the most recent digit among the last {window}, or '-'"

    def sample_length(self, n: int, length: int, seed: int | torch.Generator = 0) -> TaskData:
        """Draw n examples of ``length`` tokens after ``<s>`` (any length, e.g. longer than trained)."""
        require_positive_int(length, "length")
        saved, self.length = self.length, length
        try:
            return self.sample(n, seed)
        finally:
            self.length = saved

    def _sample(self, n, generator):
        L, w = self.length, self.window
        is_digit = torch.rand(n, L, generator=generator) < self.digit_rate  # (N, L)
        digits = torch.randint(10, (n, L), generator=generator)
        letters = 10 + torch.randint(10, (n, L), generator=generator)
        tokens = torch.where(is_digit, digits, letters)  # (N, L)
        inputs = torch.cat([torch.full((n, 1), self.bos), tokens], dim=1)  # (N, T = L + 1)
        position = torch.arange(1, L + 1).expand(n, L)  # (N, L): positions in inputs (<s> is 0)
        latest = torch.where(is_digit, position, torch.full_like(position, -L - w))  # (N, L)
        latest = torch.cummax(latest, dim=1).values  # (N, L): position of the latest digit so far
        found = position - latest < w  # (N, L): it is among the last w tokens
        where = torch.where(found, latest, 0)  # (N, L): the digit, or <s> for "none"
        answer = torch.where(found, torch.gather(inputs, 1, where), self.none)  # (N, L)
        targets = torch.cat([torch.full((n, 1), IGNORE), answer], dim=1)  # (N, T)
        source_pos = torch.cat([torch.full((n, 1), -1), where], dim=1)[..., None]  # (N, T, 1)
        return TaskData(inputs, targets, source_pos)


class AssociativeRecallTask(Task):
    """Causal associative recall: ``k1 v1 k2 v2 .. kn vn | q1 .. qn``, each query key answers its value.

    The first half stores n pairs (n different key letters, each followed by a value digit); after ``|``
    the same n keys come back in a shuffled order, and each must be answered with the digit stored
    after it. The answer is found by *content* (the matching key), wherever it sits, and every stored
    pair may be asked for: the task measures how many associations a layer can hold and recall, which is
    where a fixed-size linear-attention state and a full KV cache differ (chapter 18). ``source_pos``
    points at the stored value. Only the query positions are scored.
    """

    name = "recall"

    def __init__(self, num_pairs: int = 8, num_keys: int = 16, num_values: int = 10):
        super().__init__()
        if not 1 <= num_pairs <= num_keys <= 26 or not 2 <= num_values <= 10:
            raise ValueError(
                "need 1 <= num_pairs <= num_keys <= 26 and 2 <= num_values <= 10, "
                f"got {num_pairs}, {num_keys}, {num_values}"
            )
        self.num_pairs, self.num_keys, self.num_values = num_pairs, num_keys, num_values
        self.vocab = [chr(ord("a") + k) for k in range(num_keys)] + [str(v) for v in range(num_values)] + ["|"]
        self.sep = num_keys + num_values
        self.relation_names = ("value of the key",)
        self.seq_len = 3 * num_pairs + 1
        self.description = f"causal: {num_pairs} key-value pairs, then each key again: answer its value"

    def _sample(self, n, generator):
        P, K = self.num_pairs, self.num_keys
        keys = torch.rand(n, K, generator=generator).argsort(dim=1)[:, :P]  # (N, P): P different letters
        values = self.num_keys + torch.randint(self.num_values, (n, P), generator=generator)  # (N, P) ids
        stored = torch.stack([keys, values], dim=-1).reshape(n, 2 * P)  # (N, 2P): k1 v1 k2 v2 ...
        order = torch.rand(n, P, generator=generator).argsort(dim=1)  # (N, P): which pair each query asks
        queries = torch.gather(keys, 1, order)  # (N, P)
        inputs = torch.cat([stored, torch.full((n, 1), self.sep), queries], dim=1)  # (N, T = 3P + 1)
        answers = torch.gather(values, 1, order)  # (N, P)
        targets = torch.cat([torch.full((n, 2 * P + 1), IGNORE), answers], dim=1)  # (N, T)
        where = 2 * order + 1  # (N, P): position of the asked pair's value
        source_pos = torch.cat([torch.full((n, 2 * P + 1), -1), where], dim=1)[..., None]  # (N, T, 1)
        return TaskData(inputs, targets, source_pos)


TASKS = {
    "reverse": lambda **kw: SequenceTask("reverse", **kw),
    "copy": lambda **kw: SequenceTask("copy", **kw),
    "sort": lambda **kw: SequenceTask("sort", **kw),
    "two_relations": TwoRelationsTask,
    "grammar": GrammarTask,
    "translate": TranslateTask,
    "recent_digit": RecentDigitTask,
    "recall": AssociativeRecallTask,
}


def get_task(name: str, **options) -> Task:
    """Build a task by name (see ``TASKS``); ``options`` go to its constructor.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {sorted(TASKS)}")
    return TASKS[name](**options)
