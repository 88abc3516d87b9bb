"""What a trace's recorded rows say about acceptance: τ replayed with common random numbers.

Reading order: ``rules`` (the verification-rule catalogue: one row per rule), ``protocols``
(the replay protocols every replay class conforms to), ``chain`` (token and block
verification replayed on chain drafts, THEORY.md §2-§3), ``tree`` (a tree verifier on recorded
draft trees), ``trie`` (on tries of i.i.d. paths), ``replay_tables`` (``tables_for(trace,
rule)``: a rule's replay tables, chain or tree),
``fitted_acceptance`` (acceptance models fitted from a trace, replayed in place of its
probabilities), ``accept_predictor`` / ``tree_accept_predictor`` (learned P(accept | signals)).
"""
