"""
Messages in and out.

The inbox (routes, observe before apply), signed webhooks, the transactional outbox,
its relay to RabbitMQ and the consumer inbox.
"""
