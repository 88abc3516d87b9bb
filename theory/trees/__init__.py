"""Several drafts and draft trees: verifiers, exact laws, optima and allocation (docs/trees.md).

Reading order: ``multidraft`` (several drafts of one token), ``tree_shapes`` (draft-tree laws),
``verifiers`` (tree verifiers and the exact law of one iteration), ``lp`` (the best valid
verifier), ``stats`` (per-node numbers for replay), ``reach`` (what a subtree is worth),
``alloc`` (the best subtrees under a node budget), ``tree_theorems`` (their ``prove`` margins).
"""
