"""The translation models: RNNsearch (attention) and RNNencdec (fixed context vector)."""

from nmt.models.decoder import DecoderState
from nmt.models.encoder import EncoderOutput
from nmt.models.seq2seq import Seq2Seq, build_model, count_parameters

__all__ = ["DecoderState", "EncoderOutput", "Seq2Seq", "build_model", "count_parameters"]
