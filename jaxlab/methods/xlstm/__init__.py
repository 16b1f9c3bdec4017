"""xLSTM 7B (Beck et al., ICML 2025): the mLSTM cell in recurrent, parallel and chunkwise forms and
the xLSTM 7B language model. See ``README.md`` beside this file for what is implemented and the
results measured."""

from jaxlab.methods.xlstm.cell import MLSTMState, mlstm, mlstm_parallel, mlstm_step, zero_state
from jaxlab.methods.xlstm.config import xLSTMConfig
from jaxlab.methods.xlstm.model import xLSTM

__all__ = [
    "MLSTMState",
    "mlstm",
    "mlstm_parallel",
    "mlstm_step",
    "xLSTM",
    "xLSTMConfig",
    "zero_state",
]
