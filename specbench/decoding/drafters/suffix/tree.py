"""SuffixDecoding's suffix trees and cache, ported line for line from upstream so that a
config drafts what upstream drafts: snowflakedb/ArcticInference `csrc/suffix_decoding/
suffix_tree.cc` (`SuffixTree`) and `arctic_inference/suffix_decoding/cache.py`
(`SuffixDecodingCache`).

A `SuffixTree` holds every suffix of its sequences, cut to `max_depth` tokens, path-compressed
(a node holds a run of tokens by reference into a sequence), each node counting the suffixes
that pass through or end at it. Children are kept in decreasing count in a linked list whose
order among equal counts follows upstream's moves exactly (`_increment`, `_decrement`, the
groups of equal counts), since the speculation walks that order: the likeliest path takes the
head child, and ties in the best-first tree fall as upstream's `std::priority_queue` lets them
(`_push`, `_pop`: libstdc++'s heap). Probabilities and scores are float32 as upstream computes
them (`_f32` after each operation; every operand is a float32, so a double operation rounded
once is the float32 one).

What is not ported: the endpoint maps and the references' repair on removal. A node here
refers to a sequence's token list itself, which outlives the sequence's removal while a node
refers to it, so the tokens a node reads never change; upstream re-points such references to a
surviving sequence holding the same tokens.
"""

from __future__ import annotations

import struct
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

_FLOAT = struct.Struct("f")


def _f32(x: float) -> float:
    """`x` rounded to float32, as upstream's `float` arithmetic rounds each result."""
    return _FLOAT.unpack(_FLOAT.pack(x))[0]


@dataclass
class SuffixDraft:
    """Upstream's `Draft`: tokens, each one's parent index (-1: hangs off the context), its
    estimated probability, their float32 sum, and the context match that yielded them."""

    token_ids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0
    match_len: int = 0


class _Group:
    """A run of siblings with equal counts; `head` is its first."""

    __slots__ = ("head", "next", "prev")

    def __init__(self, head: _Node):
        self.head, self.next, self.prev = head, None, None


class _Node:
    __slots__ = (
        "count",
        "token",
        "length",
        "ref",
        "ref_idx",
        "parent",
        "children",
        "head_child",
        "tail_child",
        "next_sibling",
        "prev_sibling",
        "group",
    )

    def __init__(self, count=0, token=0, length=0, ref=None, ref_idx=-1):
        self.count, self.token, self.length = count, token, length
        self.ref, self.ref_idx = ref, ref_idx  # the node's tokens: ref[ref_idx:ref_idx+length]
        self.parent = None
        self.children: dict[int, _Node] = {}
        self.head_child = self.tail_child = None
        self.next_sibling = self.prev_sibling = None
        self.group: _Group | None = None


def _remove_from_siblings(node: _Node) -> None:
    group = node.group
    if group.head is node:
        if node.next_sibling is not None and node.next_sibling.count == node.count:
            group.head = node.next_sibling
            node.group = None
        else:
            if group.prev is not None:
                group.prev.next = group.next
            if group.next is not None:
                group.next.prev = group.prev
            group.prev = group.next = None
    else:
        node.group = None
    if node.next_sibling is not None:
        node.next_sibling.prev_sibling = node.prev_sibling
    else:
        node.parent.tail_child = node.prev_sibling
    if node.prev_sibling is not None:
        node.prev_sibling.next_sibling = node.next_sibling
    else:
        node.parent.head_child = node.next_sibling
    node.prev_sibling = node.next_sibling = None


def _insert_into_siblings_before(node: _Node, other: _Node) -> None:
    if other.prev_sibling is not None:
        other.prev_sibling.next_sibling = node
    else:
        node.parent.head_child = node
    node.next_sibling = other
    node.prev_sibling = other.prev_sibling
    other.prev_sibling = node
    prev_sibling = node.prev_sibling
    if prev_sibling is not None and node.count == prev_sibling.count:
        node.group = prev_sibling.group
    elif node.count == other.count:
        node.group = other.group
        node.group.head = node
    else:
        if node.group is None:
            node.group = _Group(node)
        group = node.group
        if prev_sibling is not None:
            group.prev = prev_sibling.group
            group.prev.next = group
        group.next = other.group
        group.next.prev = group


def _insert_into_siblings_after(node: _Node, other: _Node) -> None:
    if other.next_sibling is not None:
        other.next_sibling.prev_sibling = node
    else:
        node.parent.tail_child = node
    node.prev_sibling = other
    node.next_sibling = other.next_sibling
    other.next_sibling = node
    next_sibling = node.next_sibling
    if next_sibling is not None and node.count == next_sibling.count:
        node.group = next_sibling.group
        if node.group.head is next_sibling:
            node.group.head = node
    elif node.count == other.count:
        node.group = other.group
    else:
        if node.group is None:
            node.group = _Group(node)
        group = node.group
        if next_sibling is not None:
            group.next = next_sibling.group
            group.next.prev = group
        group.prev = other.group
        group.prev.next = group


def _replace_in_siblings(old: _Node, new: _Node) -> None:
    if old.next_sibling is not None:
        old.next_sibling.prev_sibling = new
    else:
        old.parent.tail_child = new
    if old.prev_sibling is not None:
        old.prev_sibling.next_sibling = new
    else:
        old.parent.head_child = new
    new.prev_sibling, new.next_sibling = old.prev_sibling, old.next_sibling
    old.prev_sibling = old.next_sibling = None
    if old.group.head is old:
        old.group.head = new
    new.group = old.group
    old.group = None


def _increment(node: _Node) -> None:
    """Count one more suffix through `node`, moving it ahead of the siblings it now outcounts
    (upstream's `_increment_count`)."""
    if node.parent is None:
        node.count += 1
        return
    prev = node.prev_sibling
    if prev is None or prev.count > node.count + 1:
        nxt = node.next_sibling
        if nxt is not None and nxt.count >= node.count:
            orig = node.group
            orig.head = nxt
            new = _Group(node)
            new.next = orig
            if orig.prev is not None:
                new.prev = orig.prev
                new.prev.next = new
            orig.prev = new
            node.group = new
        node.count += 1
    else:
        other = prev.group.head
        _remove_from_siblings(node)
        node.count += 1
        _insert_into_siblings_before(node, other)


def _decrement(node: _Node) -> None:
    """Count one suffix fewer through `node`, moving it behind the siblings that now outcount
    it (upstream's `_decrement_count`)."""
    if node.parent is None:
        node.count -= 1
        return
    nxt = node.next_sibling
    if nxt is None or nxt.count < node.count - 1:
        prev = node.prev_sibling
        if prev is not None and prev.count <= node.count:
            orig = node.group
            new = _Group(node)
            new.prev = orig
            if orig.next is not None:
                new.next = orig.next
                new.next.prev = new
            orig.next = new
            node.group = new
        node.count -= 1
    elif nxt.count == node.count - 1:
        nxt.group.head = node
        if node.group.head is node:
            group = node.group
            if group.prev is not None:
                group.prev.next = group.next
            group.next.prev = group.prev
        node.group = nxt.group
        node.count -= 1
    else:
        other_group = node.group.next
        _remove_from_siblings(node)
        node.count -= 1
        if other_group is None:
            _insert_into_siblings_after(node, node.parent.tail_child)
        else:
            _insert_into_siblings_before(node, other_group.head)


class _Item:
    """An entry of the best-first tree's queue (upstream's `HeapItem`)."""

    __slots__ = ("prob", "node", "idx", "parent")

    def __init__(self, prob: float, node: _Node, idx: int, parent: int):
        self.prob, self.node, self.idx, self.parent = prob, node, idx, parent


def _push(heap: list[_Item], item: _Item) -> None:
    """`std::priority_queue::push` under libstdc++ (`push_heap`'s sift-up, max-heap by prob)."""
    heap.append(item)
    _sift_up(heap, len(heap) - 1, 0, item)


def _sift_up(heap: list[_Item], hole: int, top: int, item: _Item) -> None:
    """libstdc++'s `__push_heap`."""
    parent = (hole - 1) // 2
    while hole > top and heap[parent].prob < item.prob:
        heap[hole] = heap[parent]
        hole = parent
        parent = (hole - 1) // 2
    heap[hole] = item


def _pop(heap: list[_Item]) -> _Item:
    """`top()` then `pop()` of `std::priority_queue` under libstdc++ (`pop_heap`: the last item
    sifted down from the root by `__adjust_heap`, then up by `__push_heap`)."""
    top = heap[0]
    last = heap.pop()
    length = len(heap)
    if length == 0:
        return top
    hole, child = 0, 0
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if heap[child].prob < heap[child - 1].prob:
            child -= 1
        heap[hole] = heap[child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        heap[hole] = heap[child - 1]
        hole = child - 1
    _sift_up(heap, hole, 0, last)
    return top


class SuffixTree:
    """Upstream's `SuffixTree`: sequences by id, their suffixes up to `max_depth` tokens."""

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.root = _Node()
        self.seqs: dict[int, list[int]] = {}
        self.active: dict[int, list[_Node]] = {}  # per sequence: where its last suffixes end

    def extend(self, seq_id: int, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.append(seq_id, int(token))

    def append(self, seq_id: int, token: int) -> None:
        """Append `token` to sequence `seq_id`: every suffix ending at the sequence's end (at
        most `max_depth` of them, one new) grows by it (upstream's cases 1a to 3b)."""
        root = self.root
        seq = self.seqs.setdefault(seq_id, [])
        active = self.active.setdefault(seq_id, [])
        active.append(root)
        root.count += 1
        if len(active) > self.max_depth:
            del active[0]
        seq.append(token)
        seq_len = len(seq)
        for i, node in enumerate(active):
            child = node.children.get(token)
            if child is None:
                if node.count == 1 and node is not root:
                    # 1a: only this suffix ends here, at a leaf: the leaf grows
                    node.ref, node.ref_idx = seq, seq_len - 1 - node.length
                    node.length += 1
                else:
                    # 1b: a new leaf, last among its siblings (count 1)
                    new = _Node(1, token, 1, seq, seq_len - 1)
                    new.parent = node
                    node.children[token] = new
                    if len(node.children) == 1:
                        node.head_child = node.tail_child = new
                        new.group = _Group(new)
                    else:
                        _insert_into_siblings_after(new, node.tail_child)
                    active[i] = new
            elif node.count == child.count + 1 and node is not root:
                # 2: every other suffix through the node goes on into this child
                if child.length == 1:
                    # 2a: the node and its one-token child fuse into the child
                    child.count += 1
                    child.token = node.token
                    child.length = node.length + 1
                    child.ref, child.ref_idx = seq, seq_len - child.length
                    child.parent = node.parent
                    _replace_in_siblings(node, child)
                    node.parent.children[child.token] = child
                    active[i] = child
                else:
                    # 2b: the node takes the child's first token
                    node.length += 1
                    node.ref, node.ref_idx = seq, seq_len - node.length
                    child.length -= 1
                    child.ref_idx += 1
                    child.token = child.ref[child.ref_idx]
                    if child.token != token:
                        del node.children[token]
                        node.children[child.token] = child
            elif child.length == 1:
                # 3a: the suffix moves into the child
                _increment(child)
                active[i] = child
            else:
                # 3b: the child splits after its first token, which the suffix moves into
                new = _Node(child.count, token, 1, seq, seq_len - 1)
                new.parent = node
                _replace_in_siblings(child, new)
                node.children[token] = new
                child.length -= 1
                child.ref_idx += 1
                child.token = child.ref[child.ref_idx]
                new.children[child.token] = child
                child.parent = new
                new.head_child = new.tail_child = child
                child.group = _Group(child)
                _increment(new)
                active[i] = new

    def remove(self, seq_id: int) -> None:
        """Take sequence `seq_id`'s suffixes out, dropping the nodes only they held and fusing
        a node with its one child where their counts become equal (upstream's `remove`)."""
        seq = self.seqs.pop(seq_id)
        del self.active[seq_id]
        root = self.root
        for start in range(len(seq)):
            node = root
            node.count -= 1
            idx = start
            while idx < len(seq):
                child = node.children.get(seq[idx])
                if child is None:
                    break
                if child.count > 1:
                    _decrement(child)
                else:
                    _remove_from_siblings(child)
                    del node.children[seq[idx]]
                    break
                idx += child.length
                node = child
            if node is not root and len(node.children) == 1:
                child = next(iter(node.children.values()))
                if node.count == child.count:
                    child.token = node.token
                    child.length += node.length
                    child.ref_idx -= node.length
                    child.parent = node.parent
                    _replace_in_siblings(node, child)
                    node.parent.children[node.token] = child

    def speculate(
        self,
        context: Sequence[int],
        max_spec_tokens: int,
        max_spec_factor: float,
        max_spec_offset: float,
        min_token_prob: float,
        use_tree_spec: bool,
    ) -> SuffixDraft:
        """For each context suffix of 1 to len(context) - 1 tokens that the tree holds, a draft
        of at most max_spec_factor * match + max_spec_offset tokens; the best-scoring one, the
        longer match on a tie."""
        factor, offset, floor = _f32(max_spec_factor), _f32(max_spec_offset), _f32(min_token_prob)
        best = SuffixDraft()
        for match_len in range(1, len(context)):
            node, idx = self._match(context[len(context) - match_len :])
            if node is None:
                break
            limit = int(_f32(_f32(match_len * factor) + offset) + 1e-6)
            limit = max(min(max_spec_tokens, limit), 0)
            speculate = self._speculate_tree if use_tree_spec else self._speculate_path
            draft = speculate(node, idx, limit, floor)
            if draft.score >= best.score:
                best = draft
                best.match_len = match_len
        return best

    def _match(self, pattern: Sequence[int]) -> tuple[_Node | None, int]:
        """The node where `pattern` ends, walking from the root, and how far into it."""
        node, idx = self.root, 0
        for token in pattern:
            if idx >= node.length:
                node = node.children.get(token)
                if node is None:
                    return None, -1
                idx = 0
            if node.ref[node.ref_idx + idx] != token:
                return None, -1
            idx += 1
        return node, idx

    def _speculate_path(self, node: _Node, idx: int, limit: int, floor: float) -> SuffixDraft:
        """The head-child path: each token's probability is its path's product of count ratios."""
        draft, prob = SuffixDraft(), 1.0
        while len(draft.token_ids) < limit and prob >= floor:
            if idx < node.length:
                draft.parents.append(len(draft.token_ids) - 1)
                draft.token_ids.append(node.ref[node.ref_idx + idx])
                draft.probs.append(prob)
                draft.score = _f32(draft.score + prob)
                idx += 1
            else:
                child = node.head_child
                if child is None:
                    break
                prob = _f32(prob * _f32(_f32(child.count) / _f32(node.count)))
                node, idx = child, 0
        return draft

    def _speculate_tree(self, node: _Node, idx: int, limit: int, floor: float) -> SuffixDraft:
        """Best-first: the likeliest open position next, until `limit` tokens; children below
        `floor` are never opened."""
        draft = SuffixDraft()
        heap: list[_Item] = []
        _push(heap, _Item(1.0, node, idx, -1))
        while len(draft.token_ids) < limit and heap:
            item = _pop(heap)
            node = item.node
            if item.idx < node.length:
                draft.token_ids.append(node.ref[node.ref_idx + item.idx])
                draft.parents.append(item.parent)
                draft.probs.append(item.prob)
                draft.score = _f32(draft.score + item.prob)
                _push(heap, _Item(item.prob, node, item.idx + 1, len(draft.token_ids) - 1))
            else:
                child = node.head_child
                while child is not None:
                    prob = _f32(_f32(item.prob * _f32(child.count)) / _f32(node.count))
                    if prob < floor:
                        break
                    _push(heap, _Item(prob, child, 0, item.parent))
                    child = child.next_sibling
        return draft


class SuffixCache:
    """Upstream's `SuffixDecodingCache`: a local tree per active request over its prompt and
    response, and one global tree over the responses of the last `max_cached_requests`
    requests (FIFO; -1: all; 0: none), the active ones included."""

    def __init__(self, max_tree_depth: int, max_cached_requests: int):
        self.max_tree_depth, self.max_cached_requests = max_tree_depth, max_cached_requests
        self.global_tree = SuffixTree(max_tree_depth)
        self.local: dict[Hashable, SuffixTree] = {}
        self.seq_of: dict[Hashable, int] = {}  # cached requests, oldest first
        self.req_of: dict[int, Hashable] = {}
        self.next_seq = 0

    def start_request(self, req_id: Hashable, prompt: Sequence[int]) -> None:
        """A new request: a local tree over its prompt, and a fresh global sequence for its
        response (a cached response under the same id is evicted first)."""
        self.local[req_id] = tree = SuffixTree(self.max_tree_depth)
        tree.extend(0, prompt)
        if self.max_cached_requests != 0:
            if req_id in self.seq_of:
                self.evict(req_id)
            self._new_seq(req_id)

    def stop_request(self, req_id: Hashable) -> None:
        del self.local[req_id]

    def add_active_response(self, req_id: Hashable, tokens: Sequence[int]) -> None:
        self.local[req_id].extend(0, tokens)
        if req_id in self.seq_of:
            self.global_tree.extend(self.seq_of[req_id], tokens)

    def evict(self, req_id: Hashable) -> None:
        seq_id = self.seq_of.pop(req_id)
        del self.req_of[seq_id]
        if seq_id in self.global_tree.seqs:
            self.global_tree.remove(seq_id)

    def speculate(
        self,
        req_id: Hashable,
        context: Sequence[int],
        max_spec_tokens: int,
        max_spec_factor: float,
        max_spec_offset: float,
        min_token_prob: float,
        use_tree_spec: bool,
    ) -> SuffixDraft:
        """The better-scoring of the local and the global tree's drafts (the local one on a
        tie), matched against the context's last `max_tree_depth` tokens."""
        context = context[-self.max_tree_depth :]
        knobs = (max_spec_tokens, max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec)
        local = self.local[req_id].speculate(context, *knobs)
        cached = self.global_tree.speculate(context, *knobs)
        return local if local.score >= cached.score else cached

    def _new_seq(self, req_id: Hashable) -> None:
        """The next sequence id no active request holds (upstream's `_generate_seq_id`), then
        FIFO eviction down to `max_cached_requests`, never of the new one."""
        while True:
            seq_id = self.next_seq
            self.next_seq = (self.next_seq + 1) & 0x7FFFFFFF
            if seq_id not in self.req_of or self.req_of[seq_id] not in self.local:
                break
        if seq_id in self.req_of:
            del self.seq_of[self.req_of.pop(seq_id)]
            if seq_id in self.global_tree.seqs:
                self.global_tree.remove(seq_id)
        self.seq_of[req_id], self.req_of[seq_id] = seq_id, req_id
        if self.max_cached_requests < 0:
            return
        while len(self.seq_of) > self.max_cached_requests:
            oldest = next(r for r, s in self.seq_of.items() if s != seq_id)
            self.evict(oldest)
