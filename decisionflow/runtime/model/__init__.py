"""Getting a model in and knowing it is served right: loading and converting checkpoints, and `check-model`.

`loading` finds, downloads and reads a model (a folder, a .gguf file or a hub id) into the weights the
passes run on; `model_check` decides a built-in rubric through the engine's path and through the plain
forward reference and reports where they differ. Kept apart from the passes because both concern the model
as a whole (its files, its family, its exactness), not one pass over it.
"""
