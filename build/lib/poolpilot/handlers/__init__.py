"""kopf glue: the only package that imports kopf.

`operator.run(settings)` embeds kopf with PoolPilot's registry and settings; `inferencepool` and
`gpunodepool` hold the thin handlers (`<kind>_<event>`) that hand the object to `poolpilot.reconcile`.
"""
