"""The memory inspector (``vdoctor serve``): a read-only web view of long-term memory.

An entry point at the edge, like ``jobs/``: it imports ``vdoctor`` and
``vdoctor`` never imports it. Pages are rendered on the server (Starlette and
Jinja2 templates, no JavaScript); every page's data is also served as JSON
under ``/api/`` at the same path.

- ``app``: the routes, and the read-only guard around them;
- ``views``: what each page shows, as JSON-able data (the same for HTML and ``/api/``);
- ``timeline``: a vehicle's medical record, from every version of its records;
- ``outputs``: the job's diagnoses and dead letters (``--diagnoses``);
- ``security``: the token, the methods a reader may use, and secrets kept out of pages and logs;
- ``bidi``: the bidirectional-text controls in stored text, shown on the pages as escapes;
- ``server``: runs the app (uvicorn), its logs scrubbed of secrets.
"""
