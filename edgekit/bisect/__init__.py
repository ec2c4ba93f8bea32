"""`edgekit bisect`: where along the network a build's outputs leave the reference.

taps.py chooses the intermediate tensors (module boundaries, then the ops of the first failing
module) and makes them extra outputs of the model; probe.py builds such a variant and runs it
(here or on a device, through the trial machinery); profile.py compares each tap with the host
reference and finds the first that leaves tolerance; reproducer.py writes that op alone as a
bundle with a reproduce.sh.
"""
