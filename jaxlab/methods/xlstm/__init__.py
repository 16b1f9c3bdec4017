"""xLSTM 7B (Beck et al., ICML 2025): the mLSTM cell in recurrent, parallel and chunkwise forms,
the xLSTM 7B language model, and :func:`load_pretrained` for the authors' released weights. See
``README.md`` beside this file for what is implemented and the results measured."""

from jaxlab.methods.xlstm.cell import MLSTMState, mlstm, mlstm_parallel, mlstm_step, zero_state
from jaxlab.methods.xlstm.config import xLSTMConfig
from jaxlab.methods.xlstm.model import xLSTM
from jaxlab.methods.xlstm.pretrained import load_pretrained, save_pretrained

__all__ = [
    "MLSTMState",
    "load_pretrained",
    "mlstm",
    "mlstm_parallel",
    "mlstm_step",
    "save_pretrained",
    "xLSTM",
    "xLSTMConfig",
    "zero_state",
]
