"""The configuration model: typed records of a pack's rows (:mod:`.records`), the immutable
validated snapshot a turn reads (:mod:`.snapshot`) and the flows indexed (:mod:`.flows`).
Reading, checking and building them is :mod:`convengine.config_loader`'s job."""
