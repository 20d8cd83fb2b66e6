"""The HybridFlow single controller: one driver calls methods on groups of SPMD workers.

``base`` holds the backend-independent parts (``Worker``, ``WorkerGroup``, ``@register``);
``ray`` runs worker groups as Ray actors in placement groups.
"""
