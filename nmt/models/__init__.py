"""The translation models: RNNsearch (attention) and RNNencdec (fixed context vector), and the Transformer;
each architecture's model is a `TranslationModel` (nmt/models/interface.py) named in nmt/registry.py."""

from nmt.models.interface import TranslationModel, build_model, count_parameters
from nmt.models.rnn.decoder import DecoderState
from nmt.models.rnn.encoder import EncoderOutput
from nmt.models.rnn.model import Seq2Seq

__all__ = ["DecoderState", "EncoderOutput", "Seq2Seq", "TranslationModel", "build_model", "count_parameters"]
