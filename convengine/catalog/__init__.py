"""The catalogues: the one home of every name the engine spells in more than one place.

Error codes and errors (:mod:`.errors`), step names (:mod:`.names`), audit stages (:mod:`.stages`),
the graph state's keys (:mod:`.state`), input-param keys (:mod:`.params`), ``ce_config`` keys
(:mod:`.ce_config`), column vocabularies (:mod:`.vocab`), flow node types (:mod:`.flows`), memory
lifecycle states (:mod:`.memory`), the truthiness parser (:mod:`.booleans`) and default locations
(:mod:`.defaults`). This package imports nothing else of convengine: every layer may use it.
"""
