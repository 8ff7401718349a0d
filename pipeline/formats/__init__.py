"""Document formats: one module per format (its parser and its registered `FORMAT` together), the helpers they
share (zone and date parsing, names, lines, printed values), and `registered.FORMATS`, the formats in reading
order."""
