"""A collector: its loop (:mod:`.loop`, drivable in-process) and its process entry point (:mod:`.process`)."""
