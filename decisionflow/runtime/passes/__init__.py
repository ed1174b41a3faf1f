"""The passes: one packed forward over a shared prefix, and the backends that run it.

`backend` lays out a packed pass and runs it on the engine's own decoder walk (`forward`, `decoder`,
`ops`, `branch_attention`); `model_forward` runs the same pass through a model's own forward (the
generic path) or as one plain forward per read position (the reference). `protocol.Backend` is what
the engine, the executor and the prepared-rubric cache call on any of them. Nothing here knows a
rubric's fields or answers: that is `readout`'s, one room up.
"""
