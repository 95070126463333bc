"""Order out, words and pictures in: race reports (`race_text`), and the
order graph (`order_graph`) in DOT or Mermaid (`graph_formats`)."""
