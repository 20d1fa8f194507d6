"""Rollout shapes on the Rollouts page (pure: no Streamlit, no store; docs/rollout-shapes.md).

A tree-shaped group (`rollout.shape = "tree"`) is drawn as a tree: each row under the row it branched
from (`parent_idx`, the parent's `idx`), its branch point marked (↳) by the token it branched into, that
position's entropy and the parent's token there (`branch_at`); the prefix it shares with its parent is
drawn once, in the parent, and stands in the branch as a grey "shared" mark; each row ends with its
reward, verdict and advantage. A speculative rollout's reused prefix (`reused_tokens`, the draft's
accepted tokens) is shaded apart from the tokens generated fresh (orange and dashed where the draft was
verified leniently, `draft_mode`: that row is not a sample of the current policy), and its first rejected
position (`draft_rejected_at`) marked. Every piece of text is escaped."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

REUSED_STYLE = "background:rgb(205,222,245);border-bottom:3px solid rgb(60,110,190);padding:3px 1px"
"""The band under a reused prefix: blue, framing the tokens' own (entropy) colours."""
LENIENT_STYLE = "background:rgb(250,225,190);border-bottom:3px dashed rgb(200,120,30);padding:3px 1px"
"""The band under a prefix kept by lenient verification (`rollout.speculative.mode = "lenient"`): orange,
dashed; the row is not a sample of the current policy."""
REJECTED_STYLE = "border-left:3px solid rgb(200,30,30);margin-left:1px"
"""The mark before the first token after a rejected draft (resampled, exact mode; fresh, lenient)."""
BRANCH_STYLE = ("display:inline-block;border:1px solid rgb(120,80,170);border-radius:4px;padding:0 4px;"
                "background:rgb(243,236,252);font-family:monospace;margin-right:6px")
SHARED_STYLE = "color:#888;font-family:monospace;margin-right:4px"


@dataclass
class TreeNode:
    """One rollout of a tree-shaped group, with the rows that branched from it."""

    row: dict
    children: list[TreeNode] = field(default_factory=list)
    parent: dict | None = None
    """The row it branched from; None for a root, a plain row, or a branch whose parent is not shown."""
    missing_parent: int | None = None
    """The parent's idx when it is not among the rows drawn (a filter or the page hides it)."""

    @property
    def branch_at(self) -> int | None:
        b = self.row.get("branch_at")
        return None if b is None else int(b)


def is_tree_group(rows: list[dict]) -> bool:
    """Whether a group holds a branched row of a tree-shaped run (else it is drawn as the table only)."""
    return any(r.get("shape") == "tree" and r.get("parent_idx") is not None for r in rows)


def rollout_forest(rows: list[dict]) -> list[TreeNode]:
    """The rows of one group (one step, one prompt) as a forest: each row under the row whose `idx` is its
    `parent_idx`, children in `idx` order; the roots (tree roots, plainly sampled rows, and branches whose
    parent is not among `rows`, noted in `missing_parent`) in the rows' order. A cycle is impossible in
    what the engine writes (a parent is born before its branch: a smaller idx); a row naming itself or a
    later row is drawn as a root all the same."""
    nodes = [TreeNode(r) for r in rows]
    by_idx = {int(n.row["idx"]): n for n in nodes if n.row.get("idx") is not None}
    roots = []
    for n in nodes:
        p, me = n.row.get("parent_idx"), n.row.get("idx")
        parent = by_idx.get(int(p)) if p is not None else None
        if parent is not None and me is not None and int(p) < int(me):
            n.parent = parent.row
            parent.children.append(n)
        else:
            n.missing_parent = int(p) if p is not None else None
            roots.append(n)
    for n in nodes:
        n.children.sort(key=lambda c: int(c.row["idx"]))
    return roots


@dataclass(frozen=True)
class BranchMark:
    """Where a branch left its parent: the response position, the token it took there (as it reads), the
    entropy stored for that position, and the parent's token at the same position (None: not shown)."""

    at: int
    token: str
    entropy: float | None
    parent_token: str | None


def branch_mark(node: TreeNode, pieces: list[str], parent_pieces: list[str] | None) -> BranchMark | None:
    """The branch point of `node` (None for a root): its token and entropy at `branch_at`. `pieces` are
    the row's tokens as they read (`app.rollout_view.token_pieces`), `parent_pieces` the parent's."""
    at = node.branch_at
    if at is None or at < 0:
        return None
    ents = node.row.get("token_entropy") or []
    token = pieces[at] if at < len(pieces) else ""
    entropy = float(ents[at]) if at < len(ents) and ents[at] is not None else None
    theirs = parent_pieces[at] if parent_pieces is not None and at < len(parent_pieces) else None
    return BranchMark(at, token, entropy, theirs)


def reused_split(row: dict) -> tuple[int, int | None, int | None, bool]:
    """A speculative rollout's reused prefix length (0: none, or not speculative), its first rejected
    position (None: the whole draft was kept, or there was no draft), its draft's length (None: no draft)
    and whether its draft was verified leniently (`draft_mode`: then not a sample of the current policy)."""
    if row.get("shape") != "speculative":
        return 0, None, None, False
    reused, rejected, draft = row.get("reused_tokens"), row.get("draft_rejected_at"), row.get("draft_tokens")
    return (max(0, int(reused or 0)), None if rejected is None else int(rejected),
            None if draft is None else int(draft), row.get("draft_mode") == "lenient")


def mark_reused(spans: list[str], reused: int, rejected_at: int | None, draft: int | None = None,
                lenient: bool = False) -> list[str]:
    """Token spans (one per token) with the first `reused` wrapped in the reused band (`lenient`: the
    lenient band), the token at `rejected_at` marked as the first after a rejected draft, and a note of
    the draft's fate at the end (`lenient`: that the row is not the current policy's sample)."""
    out = list(spans)
    if rejected_at is not None and 0 <= rejected_at < len(out):
        out[rejected_at] = (f'<span data-draft-rejected="{rejected_at}" title="draft rejected here: this '
                            f'token and the rest are the current policy\'s" style="{REJECTED_STYLE}">'
                            f"{out[rejected_at]}</span>")
    k = min(reused, len(out))
    if k > 0:
        title = (f"reused from the draft: {k} token{'s' if k != 1 else ''} accepted "
                 + ("leniently (not a sample of the current policy)" if lenient else "by the current policy"))
        out = [f'<span data-reused="{k}" title="{title}" style="{LENIENT_STYLE if lenient else REUSED_STYLE}">'
               f'{"".join(out[:k])}</span>', *out[k:]]
    if draft is not None:
        fate = "kept whole" if rejected_at is None else f"rejected at t{rejected_at}"
        mode = ("lenient draft", "; not a sample of the current policy") if lenient else ("draft", "")
        out.append(f'<span data-draft-mode="{"lenient" if lenient else "exact"}" style="{SHARED_STYLE};'
                   f'margin-left:8px;font-size:0.75rem">{mode[0]}: {reused} of {draft} tokens reused, {fate}'
                   f"{mode[1]}</span>")
    return out


def _fields(row: dict) -> str:
    reward, adv = row.get("reward"), row.get("advantage")
    bits = [f"#{row.get('idx')}", "reward –" if reward is None else f"reward {reward:.3g}",
            str(row.get("verdict") or "–"), "" if adv is None else f"adv {adv:+.3f}",
            f"{row.get('length') if row.get('length') is not None else '–'} tokens"]
    return " · ".join(html.escape(b) for b in bits if b)


def _shown(piece: str) -> str:
    return html.escape(piece).replace("\n", "⏎").replace("\t", "⇥") or "∅"


def _mark_html(mark: BranchMark, parent_idx: Any) -> str:
    h = "–" if mark.entropy is None else f"{mark.entropy:.3f}"
    alt = ("" if mark.parent_token is None
           else f" · #{html.escape(str(parent_idx))} took “{_shown(mark.parent_token)}”")
    return (f'<span data-branch-at="{mark.at}" data-branch-token="{html.escape(mark.token, quote=True)}" '
            f'data-branch-entropy="{h}" title="branched at response token {mark.at}: the token this row took there, '
            f'and the entropy (nats) of the distribution it was chosen from" style="{BRANCH_STYLE}">'
            f"↳ t{mark.at} “{_shown(mark.token)}” · H {h}{alt}</span>")


def _node_html(node: TreeNode, pieces_of: Any, tokens_of: Any, depth: int) -> str:
    """One node and, under it, its branches (recursively; a tree of n rows is at most n deep)."""
    row = node.row
    pieces = pieces_of(row)
    mark = branch_mark(node, pieces, pieces_of(node.parent) if node.parent is not None else None)
    start = mark.at if mark is not None else 0
    head = _mark_html(mark, row.get("parent_idx")) if mark is not None else ""
    if node.missing_parent is not None:
        head += (f'<span style="{SHARED_STYLE}">(branched from #{node.missing_parent}, not shown: a filter or '
                 "the page hides it)</span>")
        start = 0
    shared = ""
    if start > 0:
        prefix = "".join(pieces[:start])
        shared = (f'<span data-shared="{start}" title="shared with #{html.escape(str(row.get("parent_idx")))}: '
                  f'{html.escape(prefix, quote=True)}" style="{SHARED_STYLE}">…{start} shared</span>')
    tokens = tokens_of(row, start)
    kids = "".join(_node_html(c, pieces_of, tokens_of, depth + 1) for c in node.children)
    return (f'<div data-tree-node="{html.escape(str(row.get("idx")))}" data-depth="{depth}" '
            f'style="margin-left:{1.4 if depth else 0}rem;border-left:2px solid rgb(190,170,215);'
            f'padding:2px 0 2px 8px;margin-top:3px">'
            f'<div style="font-size:0.8rem;color:#444">{head}{_fields(row)}</div>'
            f'<div style="display:flex;align-items:baseline">{shared}{tokens}</div>{kids}</div>')


def tree_html(rows: list[dict], pieces_of: Any, tokens_of: Any) -> str:
    """A tree-shaped group drawn as nested branches (see the module docstring). `pieces_of(row)` gives a
    row's tokens as they read; `tokens_of(row, start)` the HTML of its tokens from `start` on (coloured
    as on the rest of the page)."""
    forest = rollout_forest(rows)
    trees = sum(1 for n in forest if n.children)
    body = "".join(_node_html(n, pieces_of, tokens_of, 0) for n in forest)
    first = rows[0] if rows else {}
    return (f'<div data-rollout-tree="{html.escape(str(first.get("prompt_id")), quote=True)}" '
            f'data-step="{html.escape(str(first.get("step")))}" style="font-size:0.85rem">'
            f'<div style="color:#666;font-size:0.8rem">{len(rows)} rollouts: {trees} tree'
            f"{'s' if trees != 1 else ''} (↳ a branch point: response position t, the token taken there, that "
            "position's entropy H in nats, the parent's token; … the prefix shared with the parent, drawn there), "
            "the other rows sampled plainly</div>" + body + "</div>")
