"""How a file leaves: deletion (mark_deleted), purge, cleanup (STYLE.md, "When app/ grows"). Uses content/
only through the domain and db layers."""
