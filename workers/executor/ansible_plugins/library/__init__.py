"""Module documentation: ``zuul_return``'s (the work is its action plugin's, ``../action``)."""
