"""Beyond one machine: the engine in a Ray Data actor pool (the model loaded once per actor).

`decide_dataset` maps any Ray Dataset with an id and a text column; `decide_file_on_ray` is
`decisionflow run --input ... --output ... --engine ray`, resumable like the plain run. Ray is an
optional extra (`pip install 'decisionflow[ray]'`) imported only when one of them runs.
"""

from .dataset import RayOptions, decide_dataset
from .files import decide_file_on_ray

__all__ = ["RayOptions", "decide_dataset", "decide_file_on_ray"]
