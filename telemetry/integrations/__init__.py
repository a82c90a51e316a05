"""Meeting users in the training code they already have: callbacks for the Hugging Face
``Trainer`` (:mod:`.huggingface`) and the Lightning ``Trainer`` (:mod:`.lightning`).

Both drive one :class:`~telemetry.integrations.loop.LoopTracker`, which turns a framework's
callback events into telemetry steps and phases and never lets an error reach the framework.
"""
