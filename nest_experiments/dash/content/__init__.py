"""The media: ladders, generated and encoded media, the MPD, MP4 boxes, and the ``media`` sub-command."""
