"""The repository as a whole: the README's promises, the layers and the size of modules."""
