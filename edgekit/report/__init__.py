"""Reports people open in a browser (self-contained HTML with inline SVG plots)."""
