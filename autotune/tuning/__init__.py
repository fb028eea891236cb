"""autotune.tuning: the tuning entry points and what they hand the user back.

``tune`` searches one function's schedules, ``tune_model`` a whole model's tasks (with the
in-model ``rerank`` of the best candidates); ``history`` applies the records at build time
(``apply_history_best`` and the one rule that chooses a record); ``report`` and ``progress``
write what a run did.
"""
