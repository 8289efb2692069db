# jobs: see the module's files; filled in by its issue.
