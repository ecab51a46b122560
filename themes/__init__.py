"""Textual CSS shipped with geotrain: base.tcss (layout) and one palette file per theme."""
