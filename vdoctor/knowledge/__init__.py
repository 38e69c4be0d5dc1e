"""Knowledge: the DTC pack we ship (``pack``), code tables (``table``), chunks and their search.

The knowledge-store role (``knowledge/stores/``) is shaped like the L3 stores:
a protocol, a closed registry by URL scheme, one module per backend, one
contract suite over all of them.
"""

from vdoctor.knowledge.pack import ConfirmRule, DtcEntry, KnowledgePack, load_pack
from vdoctor.lines import fmt_num

__all__ = ["ConfirmRule", "DtcEntry", "KnowledgePack", "fmt_num", "load_pack"]
