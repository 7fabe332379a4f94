"""``--tfperf-against``, the paired pull-request gate, all of it in one folder: the change measured beside its baseline.

``plan`` is the measuring plan (looks, and the confirmation by two fresh
processes); ``partner`` starts and drives the baseline's session (the
coordinator), ``partner_server`` is that session's side and the wire both
speak; ``partner_tree`` is where it runs, ``freeze`` stops the side that is
not timed, and ``baseline_revision`` finds the revision for
``--tfperf-against=auto``. All sit in the session layer
(tests/unit/test_layers.py); the git calls and worktrees they share with
``tfperf-bisect`` stay in ``session/git_tree``. Nothing is imported here, so
loading the plugin stays light.
"""
